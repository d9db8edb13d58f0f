"""Pinned checkpoint copies (runtime/rank/checkpoints/pinned_save.py): the page-locked bytes a save holds,
the check against the node's room, the largest storage found through optimizers (torch's AdamW
in a wrapper as accelerate's, DeepSpeed-shaped partitions), and the save wrapper that sets
torch's switch per save, says once when a save goes pageable and releases after every save."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hpc_grpo.runtime.rank.checkpoints import pinned_save

GIB = 2**30


@pytest.fixture(autouse=True)
def _torch_default() -> Iterator[None]:
    yield
    pinned_save.set_pinned(False)  # a process-wide setting: leave it as torch has it


def test_two_blocks_of_the_largest_rounded_up_to_a_power_of_two() -> None:
    assert pinned_save.block_bytes(0) == 0
    assert pinned_save.block_bytes(4 * GIB) == 8 * GIB  # a power of two stays
    assert pinned_save.block_bytes(4 * GIB + 1) == 16 * GIB
    assert pinned_save.block_bytes(13_300_000_000) == 32 * GIB  # 7B ZeRO-2 on 2 GPUs: 2 x 16 GiB
    assert pinned_save.fits(3 * GIB, 2, 32 * GIB)  # 2 x 8 GiB within half of 32
    assert not pinned_save.fits(3 * GIB, 2, 31 * GIB)
    assert pinned_save.fits(3 * GIB, 0, 16 * GIB)  # counted as one rank


def _trainer(model: torch.nn.Module, optimizer: Any) -> Any:
    class Trainer:
        pass

    trainer = Trainer()
    trainer.model, trainer.optimizer = model, optimizer  # type: ignore[attr-defined]
    return trainer


def test_the_largest_storage_is_found_through_the_optimizers_it_saves() -> None:
    class Wrapped:  # accelerate's AcceleratedOptimizer keeps the optimizer as .optimizer
        def __init__(self, optimizer: Any) -> None:
            self.optimizer = optimizer

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    adam = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 64)).sum().backward()
    adam.step()  # m and v exist now

    def every(_: torch.Tensor) -> bool:  # CPU tensors stand for device tensors here
        return True

    trainer = _trainer(model, Wrapped(adam))
    assert pinned_save.largest_device_storage(trainer, every) == 64 * 32 * 4  # weight, m, v
    assert pinned_save.largest_device_storage(trainer) == 0  # nothing on a device here

    class ZeroOptimizer:  # DeepSpeed's ZeRO-2 shape: flat fp32 partitions, torch's Adam inside
        def __init__(self) -> None:
            flat = torch.zeros(10_000)
            self.single_partition_of_fp32_groups = [flat]
            self.optimizer = torch.optim.Adam([flat])
            self.optimizer.state[flat] = {"exp_avg": torch.zeros(10_000),
                                          "exp_avg_sq": torch.zeros(12_000)}

    zero = _trainer(model, ZeroOptimizer())
    assert pinned_save.largest_device_storage(zero, every) == 48_000  # exp_avg_sq's storage
    flat = torch.zeros(50_000)  # ZeRO-1/2's bf16 weights: views into one flat buffer
    views = torch.nn.Module()
    views.register_parameter("w", torch.nn.Parameter(flat[:100]))
    assert pinned_save.largest_device_storage(_trainer(views, None), every) == 200_000


def test_each_save_is_pinned_where_it_fits_and_released_after(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from torch.utils.serialization import config

    assert pinned_save.pin_saves(_trainer(torch.nn.Linear(2, 2), None), {}, 1) is None  # no CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU node
    released: list[bool] = []
    monkeypatch.setattr(pinned_save, "release", lambda: released.append(True))
    monkeypatch.setattr(pinned_save, "largest_device_storage", lambda trainer: 3 * GIB)
    seen: list[bool] = []

    class Trainer:
        def _save_checkpoint(self, model: Any, trial: Any) -> str:
            seen.append(config.save.use_pinned_memory_for_d2h)
            if trial == "fail":
                raise OSError("disk full")
            return "saved"

    trainer = Trainer()
    room = [64 * GIB]
    assert pinned_save.pin_saves(trainer, {pinned_save.ENV: "0"}, 2, lambda: room[0]) is None
    line = pinned_save.pin_saves(trainer, {}, 2, lambda: room[0])
    assert line and "pinned memory" in line and f"{pinned_save.ENV}=0" in line
    assert trainer._save_checkpoint(None, None) == "saved"
    room[0] = 31 * GIB  # 2 ranks x 2 x 4 GiB no longer fit in half of it
    assert trainer._save_checkpoint(None, None) == "saved"
    with pytest.raises(OSError):
        trainer._save_checkpoint(None, "fail")
    assert seen == [True, False, False] and released == [True, True, True]
    assert config.save.use_pinned_memory_for_d2h is False  # off between saves
    said = capsys.readouterr().out
    assert said.count("copied through pageable memory") == 1, said  # said once
    assert "2 rank(s) x 8.0 GiB" in said and "31.0 GiB available" in said


def test_this_torch_has_the_switch_and_a_way_to_release(tmp_path: Path) -> None:
    from torch.utils.serialization import config

    assert pinned_save.set_pinned(True) and config.save.use_pinned_memory_for_d2h is True
    assert (getattr(getattr(torch, "accelerator", None), "empty_host_cache", None) is not None
            or hasattr(torch._C, "_host_emptyCache"))
    pinned_save.release()  # no device here: nothing to give back, and no error
    state = {"m": torch.arange(10.0)}
    torch.save(state, tmp_path / "x.pt")  # CPU storages skip the copy either way
    assert torch.equal(torch.load(tmp_path / "x.pt")["m"], state["m"])
