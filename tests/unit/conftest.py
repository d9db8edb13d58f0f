"""The unit tests' one fake world: fake Slurm binaries on PATH (``slurmfake.py``).

A module that needs the binaries to answer something more for every test overrides ``fake`` with
a fixture of the same name that takes this one and adds its answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.slurmfake import FakeSlurm, install


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """sbatch, squeue, sacct, scontrol, scancel, srun, sinfo, salloc for this test only: sbatch
    answers "Submitted batch job 4242", the others print nothing until told (``answer``), and
    every call is recorded (``calls``)."""
    return install(tmp_path, monkeypatch)
