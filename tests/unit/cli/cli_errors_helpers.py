"""The refused-command check and fake Slurm of the CLI error tests (moved out of
test_cli_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.slurmfake import FakeSlurm


@pytest.fixture
def fake_slurm(fake: FakeSlurm) -> FakeSlurm:
    """The shared fake Slurm (tests/unit/conftest.py) with four nodes: a refused request must
    call none of it."""
    fake.answer("sinfo", "node1\nnode2\nnode3\nnode4\n")
    return fake


def assert_refused(code: int, stderr: str, root: Path, calls: FakeSlurm, *words: str) -> None:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]
    assert calls.calls("sbatch") == []
    assert not root.exists() or not any(root.iterdir())
