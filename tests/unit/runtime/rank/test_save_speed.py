"""torch.save without CRC-32s (runtime/rank/save_speed.py): off by default, on with the
variable, and a file written either way loads to the same values on both of the resume's read
paths (mapped, as checkpoint_read.py reads DeepSpeed's files, and whole)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hpc_grpo.runtime.rank import save_speed
from hpc_grpo.runtime.rank.checkpoint_read import MappedReads, mapped_load
from tests.unit.runtime.rank.test_checkpoint_read import _equal, _saved


@pytest.fixture(autouse=True)
def _torch_default() -> Iterator[None]:
    yield
    torch.serialization.set_crc32_options(True)  # process-wide settings: leave them as found
    save_speed.configure({save_speed.ENV: "1", save_speed.PINNED_ENV: "0"})


def _crcs(path: Path) -> list[int]:
    with zipfile.ZipFile(path) as archive:
        return [info.CRC for info in archive.infolist() if info.file_size > 0]


def test_off_by_default_and_still_read_exactly(tmp_path: Path) -> None:
    line = save_speed.configure({})
    assert "without a CRC-32" in line and save_speed.ENV in line
    path = tmp_path / "optim_states.pt"
    expected = _saved(path)
    assert set(_crcs(path)) == {0}  # nothing computed
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is not None  # what a zip checker then reports
    reads = MappedReads()
    assert _equal(mapped_load(reads)(None, str(path), map_location="cpu"), expected)
    assert reads.mapped == [path.stat().st_size]
    assert _equal(torch.load(path, weights_only=False), expected)


def test_the_variable_writes_them(tmp_path: Path) -> None:
    assert "carry a CRC-32" in save_speed.configure({save_speed.ENV: "1"})
    path = tmp_path / "optim_states.pt"
    expected = _saved(path)
    assert all(crc != 0 for crc in _crcs(path))
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
    assert _equal(torch.load(path, weights_only=False, mmap=True), expected)


def test_the_setting_is_made_again_each_time(tmp_path: Path) -> None:
    save_speed.configure({save_speed.ENV: "1"})
    save_speed.configure({save_speed.ENV: "0"})
    path = tmp_path / "x.pt"
    _saved(path)
    assert set(_crcs(path)) == {0}


def test_pinned_copies_by_default_off_with_the_variable_and_released_after_each_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.serialization import config
    from transformers import TrainerCallback

    assert "pinned" not in save_speed.configure({})  # no CUDA device here: nothing to copy
    assert config.save.use_pinned_memory_for_d2h is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU node
    try:
        line = save_speed.configure({})
        assert "pinned memory" in line and config.save.use_pinned_memory_for_d2h is True
        assert f"{save_speed.PINNED_ENV}=0" in line
        path = tmp_path / "x.pt"
        expected = _saved(path)  # no accelerator here: torch falls back to storage.cpu()
        assert _equal(torch.load(path, weights_only=False), expected)

        class Trainer:
            def __init__(self) -> None:
                self.callbacks: list[TrainerCallback] = []

            def add_callback(self, callback: TrainerCallback) -> None:
                self.callbacks.append(callback)

        off, on = Trainer(), Trainer()
        save_speed.install(off, {save_speed.PINNED_ENV: "0"})
        save_speed.install(on, {})
        assert off.callbacks == [] and len(on.callbacks) == 1
        released: list[bool] = []
        original = save_speed.release_pinned
        save_speed.release_pinned = lambda: released.append(True)  # type: ignore[assignment]
        try:
            on.callbacks[0].on_save(None, None, None)
        finally:
            save_speed.release_pinned = original  # type: ignore[assignment]
        assert released == [True]
        monkeypatch.undo()
        save_speed.release_pinned()  # no accelerator: nothing cached, and no error
        assert "pinned" not in save_speed.configure({save_speed.PINNED_ENV: "0"})
        assert config.save.use_pinned_memory_for_d2h is False
    finally:
        config.save.use_pinned_memory_for_d2h = False
