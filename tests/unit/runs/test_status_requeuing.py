"""A run Slurm will start again is shown as waiting for its requeue, not as failed (#58): a node
lost, the surviving rank's "RuntimeError: ... gloo ... Connection closed by peer" in state.json
and 0 requeues read as final while Slurm brought the run back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.runs import track
from tests.unit.slurmfake import FakeSlurm, identity, make_run, sacct_line, squeue_line

T0, T1 = "2026-01-01T10:00:00", "2026-01-01T10:05:00"
GLOO = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [10.0.0.2]:5678")


def _failed_run(tmp_path: Path, *, retry: str = "after", message: str = GLOO,
                cause: str = "node failure") -> tuple[Path, dict[str, str]]:
    """A run whose attempt at step 3 failed as the surviving rank recorded it; ``retry``: the
    node task's requeue line in retries.jsonl, "after" the attempt started, "before" (an older
    attempt's), or "" none."""
    run_dir = tmp_path / "runs" / "lost-0001"
    job = identity(run_dir, "7")
    make_run(tmp_path / "runs", "lost-0001", phase="training", step=3, job=job)
    started = time.time() - 60
    (run_dir / "state.json").write_text(json.dumps({
        "phase": "failed", "step": 3, "max_steps": 10, "last_checkpoint_step": 2,
        "stop_cause": cause, "message": message, "attempt": "slurm-7.0", "started": started}))
    if retry:
        when = started + 30 if retry == "after" else started - 30
        (run_dir / "retries.jsonl").write_text(json.dumps(
            {"time": when, "checkpoint_step": 2, "exit_code": 1, "job_id": "7",
             "cause": "node failure"}) + "\n")
    return run_dir, job


def _slurm(fake: FakeSlurm, job: dict[str, str], sacct: list[tuple[str, str]],
           queue: str = "") -> None:
    fake.answer("sacct", "".join(sacct_line("7", state, submit, submit_line=job["script"])
                                 for state, submit in sacct))
    fake.answer("squeue", squeue_line("7", queue, T1, command=job["script"]) if queue else "")


@pytest.mark.parametrize(("sacct", "queue", "retry"), [
    ([("NODE_FAIL", T0), ("PENDING", T1)], "PENDING", ""),  # requeued, waiting: restart count 1
    ([("RUNNING", T0)], "REQUEUE_HOLD", ""),
    ([("RUNNING", T0)], "COMPLETING", ""),  # Slurm requeueing it after the node failure
    ([("NODE_FAIL", T0)], "", "after"),  # the node task asked; sacct's new record not there yet
    ([("RUNNING", T0)], "RUNNING", "after"),  # the node task asking right now
])
def test_a_run_slurm_will_restart_shows_requeuing_not_failed(
        fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        sacct: list[tuple[str, str]], queue: str, retry: str) -> None:
    _, job = _failed_run(tmp_path, retry=retry)
    _slurm(fake, job, sacct, queue)
    row = track.status()[0]
    assert row.requeuing.startswith("REQUEUING: node failure at step 3, Slurm will restart it")
    assert not row.finished and row.requeues >= 1
    assert any(r.get("pending") for r in row.restarts) or row.requeues == 1
    monkeypatch.setenv("COLUMNS", "200")
    out = CliRunner().invoke(main, ["status"]).stdout
    lines = out.splitlines()
    assert lines[1].split()[2] == "REQUEUING" and lines[1].split()[7] != "0", out
    assert f"lost-0001: {row.requeuing}" in out and "failed:" not in out and "gloo" not in out


def test_a_requeued_job_slurm_holds_says_how_to_release_it(fake: FakeSlurm, tmp_path: Path) -> None:
    """A review of #58's first version: REQUEUE_HOLD (and JobHeldUser/Admin, a launch failure's
    hold) read "Slurm will restart it", but nothing starts a held job until it is released."""
    _, job = _failed_run(tmp_path, retry="")
    fake.answer("sacct", sacct_line("7", "NODE_FAIL", T0, submit_line=job["script"]))
    fake.answer("squeue", squeue_line("7", "REQUEUE_HOLD", T1, command=job["script"],
                                      reason="job requeued in held state"))
    row = track.status()[0]
    assert row.requeuing == ("REQUEUING: node failure at step 3, held by Slurm (job requeued in "
                             "held state): `scontrol release 7` lets it start")
    assert not row.finished


@pytest.mark.parametrize(("sacct", "queue", "retry", "message"), [
    ([("FAILED", T0)], "", "", GLOO),  # no requeue anywhere: final
    ([("FAILED", T0)], "", "before", GLOO),  # an earlier attempt's retry; this one failed for good
    ([("NODE_FAIL", T0)], "", "after", "requeue failed: scontrol: Access denied"),
])
def test_a_run_nothing_restarts_still_shows_failed(
        fake: FakeSlurm, tmp_path: Path, sacct: list[tuple[str, str]], queue: str, retry: str,
        message: str) -> None:
    _, job = _failed_run(tmp_path, retry=retry, message=message)
    _slurm(fake, job, sacct, queue)
    row = track.status()[0]
    assert row.requeuing == "" and row.finished and row.state in ("FAILED", "NODE_FAIL")


def test_completing_after_a_cancel_is_not_a_requeue(fake: FakeSlurm, tmp_path: Path) -> None:
    _, job = _failed_run(tmp_path, retry="", cause="cancelled")
    _slurm(fake, job, [("RUNNING", T0)], "COMPLETING")
    assert track.status()[0].requeuing == ""


def test_a_stalled_run_whose_retry_is_due_stays_stalled_with_the_requeue_said_below(
        fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI on #58's code: the hang watchdog's run came up REQUEUING once the node task's retry
    was due, where runs/views.py promises STALLED until the next attempt starts. STALLED is the
    column (the more telling state), and the REQUEUING line says Slurm will restart it."""
    run_dir, job = _failed_run(tmp_path, retry="after", cause="stalled", message="")
    state = json.loads((run_dir / "state.json").read_text())
    state.update(phase="training", stalled={"ranks_behind": [3], "line": "no progress for 12s"})
    (run_dir / "state.json").write_text(json.dumps(state))
    _slurm(fake, job, [("RUNNING", T0)], "RUNNING")
    row = track.status()[0]
    assert row.stalled and row.requeuing.startswith("REQUEUING: "), row
    monkeypatch.setenv("COLUMNS", "200")
    out = CliRunner().invoke(main, ["status"]).stdout
    assert out.splitlines()[1].split()[2] == "STALLED", out
    assert f"lost-0001: {row.requeuing}" in out and "lost-0001: stalled: no progress" in out, out
