"""torch.save without CRC-32s (runtime/rank/checkpoints/save_speed.py): off by default, on with the
variable, and a file written either way loads to the same values on both of the resume's read
paths (mapped, as checkpoints/read.py reads DeepSpeed's files, and whole)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hpc_grpo.runtime.rank.checkpoints import save_speed
from hpc_grpo.runtime.rank.checkpoints.read import MappedReads, mapped_load
from tests.unit.runtime.rank.checkpoint_read_helpers import _equal, _saved


@pytest.fixture(autouse=True)
def _torch_default() -> Iterator[None]:
    yield
    torch.serialization.set_crc32_options(True)  # a process-wide setting: leave it as found


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

