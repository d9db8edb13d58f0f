"""`status` says why a run failed (a configuration error with its exception line) and shows no
"0/-1" for a run that trains by epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.runs import track
from tests.unit.slurmfake import FakeSlurm, identity, make_run, sacct_line

T0 = "2026-01-01T10:00:00"
LINE = ("ValueError: log_completions_hub_repo is set, but log_completions is False. Enable "
        "log_completions to upload completions to the Hub, or unset log_completions_hub_repo.")


def _state(run_dir: Path, **state: object) -> None:
    (run_dir / "state.json").write_text(json.dumps(state))


def test_a_configuration_error_is_shown_with_its_exception_line(
    fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = identity(tmp_path / "runs" / "bad-0001", "7")
    run_dir = make_run(tmp_path / "runs", "bad-0001", job=job)
    _state(run_dir, phase="failed", step=0, max_steps=-1, stop_cause="configuration error",
           message=LINE, attempt="slurm-7.0")
    fake.answer("sacct", sacct_line("7", "FAILED", T0, code="1:0", submit_line=str(job["script"])))
    row = track.status()[0]
    assert (row.state, row.phase, row.cause, row.message) == (
        "FAILED", "failed", "configuration error", LINE)
    monkeypatch.setenv("COLUMNS", "100")
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[:4] == ["bad-0001", "7", "FAILED", "0/10"]  # run.json says 10
    assert f"bad-0001: failed: configuration error: {LINE}" in " ".join(lines[2:])
    data = json.loads(CliRunner().invoke(main, ["status", "--json"]).stdout)[0]
    assert (data["cause"], data["message"]) == ("configuration error", LINE)


def test_train_by_epochs_shows_the_step_alone_until_the_trainer_counts(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run_dir = make_run(tmp_path / "runs", "epochs-0001", job=identity(tmp_path / "runs" /
                                                                       "epochs-0001", "8"))
    record = json.loads((run_dir / "run.json").read_text())
    record["grpo_config"] = {"max_steps": -1}
    (run_dir / "run.json").write_text(json.dumps(record))
    _state(run_dir, phase="starting", step=0, max_steps=-1)
    assert track.status()[0].max_steps == 0
    _state(run_dir, phase="training", step=3, max_steps=24)  # the trainer's count, first step
    assert track.status()[0].max_steps == 24


def test_a_message_that_is_not_text_is_a_problem_not_a_crash(fake: FakeSlurm,
                                                              tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "runs", "odd-0001", job=identity(tmp_path / "runs" /
                                                                   "odd-0001", "9"))
    _state(run_dir, phase="failed", message={"no": "text"})
    row = track.status()[0]
    assert row.message == "" and 'state.json: message is {"no": "text"}, not text' in row.note
