"""Reading a checkpoint back through mappings (runtime/rank/checkpoints/read.py): where it is on,
that the values are torch.load's, that small tensors leave the mapping at once, that a file is
no longer mapped once nothing holds its large tensors (and is reported while something does),
and DeepSpeed's own checkpoint engine patched for the read and put back at train begin."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch

from hpc_grpo.runtime.rank.checkpoints import read as checkpoint_read
from hpc_grpo.runtime.rank.checkpoints.read import (
    MappedReads,
    copy_small,
    mapped_load,
    still_mapped,
    wanted,
)
from tests.unit.runtime.rank.checkpoint_read_helpers import BIG, _equal, _saved
from tests.unit.runtime.rank.runtime_checks_helpers import make_run, record


def _run(device: str = "cuda", **deepspeed: Any) -> Any:
    ds = {"zero_stage": 2, **deepspeed} if deepspeed.get("zero_stage", 2) is not None else None
    return record(make_run(1, 2, 1) | {"device": device, "deepspeed": ds})


@pytest.mark.parametrize(("device", "ds", "env", "expected"), [
    ("cuda", {"zero_stage": 2}, {}, True),
    ("cuda", {"zero_stage": 3}, {}, True),
    ("cuda", {"zero_stage": 1}, {}, True),
    ("cuda", {"zero_stage": 3, "offload_optimizer": True}, {}, False),  # host tensors kept
    ("cuda", {"zero_stage": 2, "offload_optimizer": True}, {}, False),
    ("cpu", {"zero_stage": 2}, {}, False),  # everything stays on the host
    ("cuda", {"zero_stage": 0}, {}, False),
    ("cuda", {"zero_stage": None}, {}, False),  # no DeepSpeed
    ("cuda", {"zero_stage": 2}, {checkpoint_read.ENV: "0"}, False),
])
def test_where_it_is_on(device: str, ds: dict[str, Any], env: dict[str, str], expected: bool) -> None:
    assert wanted(_run(device, **ds), env) is expected


def test_a_mapped_read_is_torch_loads_and_lets_the_file_go(tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "global_step7" / "states.pt"
    path.parent.mkdir(parents=True)
    expected = _saved(path)
    reads = MappedReads()
    loaded = mapped_load(reads)(None, str(path), map_location=torch.device("cpu"))
    assert _equal(loaded, expected) and type(loaded["module"]) is OrderedDict
    assert reads.mapped == [path.stat().st_size] and reads.copied == []
    assert still_mapped(tmp_path / "ckpt") == [str(path.resolve())]  # the large tensors map it
    small = [loaded["optimizer"]["state"][0]["step"], loaded["module"]["b"],
             loaded["optimizer"]["groups"][0][0]]
    big = [loaded["module"]["w"], loaded["optimizer"]["state"][0]["exp_avg"]]
    gpu_like = [t.clone() for t in big]  # what the optimizer and the module do with them
    del loaded, big
    assert still_mapped(tmp_path / "ckpt") == []  # the small tensors held alone do not
    assert [float(t.sum()) for t in small] == [7.0, 3.0, 0.0]
    assert torch.equal(gpu_like[0], expected["module"]["w"])


def test_a_large_tensor_kept_as_loaded_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "states.pt"
    path.parent.mkdir()
    _saved(path)
    kept = mapped_load(MappedReads())(None, str(path))["optimizer"]["state"][0]["exp_avg"]
    assert still_mapped(tmp_path / "ckpt") == [str(path.resolve())]  # as offload would keep it
    del kept
    assert still_mapped(tmp_path / "ckpt") == []


def test_the_legacy_format_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    expected = _saved(path, legacy=True)
    reads = MappedReads()
    loaded = mapped_load(reads)(None, str(path))
    assert _equal(loaded, expected)
    assert reads.copied == [path.stat().st_size] and reads.mapped == []
    assert still_mapped(tmp_path) == []
    assert reads.first is not None
    line = reads.line(reads.first + 2)
    assert "0 file(s) mapped (0.0 GiB), 1 read whole (0.0 GiB), " in line
    assert "2.0 s from the first file's read to train begin" in line


def test_copy_small_leaves_large_tensors_and_other_values() -> None:
    big, small = torch.zeros(BIG), torch.zeros(4)
    out = copy_small({"a": [big, small], "b": (small, "x"), "c": 3})
    assert out["a"][0] is big and out["a"][1] is not small and torch.equal(out["a"][1], small)
    assert out["b"][0] is not small and out["b"][1] == "x" and out["c"] == 3


def test_still_mapped_reads_the_maps_file(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-2"
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f00-7f10 r--p 00000000 fd:01 12 {folder}/global_step2/optim.pt\n"
        f"7f10-7f20 r--p 00000000 fd:01 13 {tmp_path}/checkpoint-20/optim.pt\n"
        "7f20-7f30 rw-p 00000000 00:00 0 \n"
        "7f30-7f40 rw-p 00000000 00:00 0 [heap]\n")
    assert still_mapped(folder, maps) == [f"{folder.resolve()}/global_step2/optim.pt"]


class _Trainer:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)


def test_deepspeeds_engine_is_patched_for_the_read_only(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    original = TorchCheckpointEngine.load
    trainer = _Trainer()
    assert checkpoint_read.read_through_mappings(trainer, _run(), None, {}) is None  # not a resume
    assert checkpoint_read.read_through_mappings(trainer, _run("cpu"), tmp_path, {}) is None
    assert trainer.callbacks == [] and TorchCheckpointEngine.load is original
    path = tmp_path / "states.pt"
    expected = _saved(path)
    try:
        assert "mappings" in (checkpoint_read.read_through_mappings(trainer, _run(), tmp_path, {}) or "")
        assert TorchCheckpointEngine.load is not original
        loaded = TorchCheckpointEngine(None).load(str(path), map_location="cpu")
        assert _equal(loaded, expected)
        (callback,) = trainer.callbacks
        callback.on_train_begin(None, None, None)  # the loaded dict still held: reported
        assert TorchCheckpointEngine.load is original
        out = capsys.readouterr().out
        assert "1 file(s) mapped" in out and "still mapped after the read" in out
        del loaded
        assert still_mapped(tmp_path) == []
    finally:
        TorchCheckpointEngine.load = original  # type: ignore[method-assign]


def test_a_file_that_cannot_be_mapped_is_read_whole(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "states.pt"
    expected = _saved(path)
    real_load = torch.load

    def no_mmap(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("mmap"):
            raise RuntimeError("mmap not supported on this file system")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", no_mmap)
    reads = MappedReads()
    assert _equal(mapped_load(reads)(None, str(path)), expected)
    assert reads.mapped == [] and reads.copied == [path.stat().st_size]
    assert "not mapped: states.pt: mmap not supported" in reads.line(0.0)
