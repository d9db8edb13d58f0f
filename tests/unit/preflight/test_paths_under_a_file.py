"""A folder the user names that is a file or lies under one (#58): refused in one line by the
one rule (rundir.checkpoints.folder_blocked) before any work, instead of a traceback from the
mkdir after the work (site init asked Slurm first, example-model imported torch first and
blamed a missing runtime extra, doctor ran its job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from tests.unit.slurmfake import FakeSlurm


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("mine\n")
    return path


def _refused(args: list[str], *words: str) -> None:
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0]


def test_site_init_output_under_a_file(blocker: Path, fake: FakeSlurm) -> None:
    _refused(["site", "init", "mine", "--output", str(blocker / "mine.yaml")],
             f"its folder {blocker} is a file")
    assert fake.calls("scontrol") == [] and blocker.read_text() == "mine\n"


def test_example_model_under_a_file(blocker: Path) -> None:
    _refused(["example-model", str(blocker / "tiny")],
             f"model folder {blocker / 'tiny'} is under the file {blocker}")
    _refused(["example-model", str(blocker / "a" / "b")], f"is under the file {blocker}")


def test_doctor_output_root_under_a_file(blocker: Path, fake: FakeSlurm) -> None:
    fake.answer("sinfo", "node1\nnode2\nnode3\nnode4\n")
    _refused(["doctor", "--site", "sandbox", "--output-root", str(blocker / "runs")],
             "--output-root", f"is under the file {blocker}")
    assert fake.calls("srun") == [] and fake.calls("sbatch") == []
