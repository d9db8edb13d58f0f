"""Off a terminal nothing is wrapped (#58): rich assumed 80 columns and split the printed
``wandb sync`` command, paths and doctor's details; every command's console comes from
runs/terminal.py (tests/unit/project/test_facts_once.py holds that)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.preflight.doctor import Result, print_table
from hpc_grpo.preflight.node_job import Row
from hpc_grpo.runs import views
from tests.unit.slurmfake import make_run

LONG = "/shared/projects/a-rather-long-project-name/hpc-grpo-runs/" + "x" * 160  # past 200 columns


@pytest.fixture(autouse=True)
def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def test_follow_prints_the_sync_command_on_one_line_into_a_pipe(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = make_run(tmp_path / "runs", "r-1", phase="done", step=10, site="local")
    command = f"wandb sync --project hpc-grpo {run_dir}/wandb/offline-run-* {LONG}"
    state = json.loads((run_dir / "state.json").read_text())
    (run_dir / "state.json").write_text(json.dumps({**state, "tracker_sync": command}))
    assert views.follow(run_dir, api.progress, poll=0.01) == 0
    assert f"W&B offline run; upload it with: {command}" in capsys.readouterr().err.splitlines()


def test_doctor_rows_stay_whole_into_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    detail = f"output root {LONG} writable, 1.2 GB/s"
    print_table(Result("sandbox", (Row("output write", "pass", ("node1",), detail),), ()))
    assert any(line.rstrip().endswith(detail) for line in capsys.readouterr().out.splitlines())

