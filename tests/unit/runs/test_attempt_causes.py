"""status checks each restart's cause against sacct's record of the attempt it ended (the states
`sacct -D -X` printed on the sandbox: tests/unit/records/slurm_causes.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.rundir.view import RestartLine
from hpc_grpo.runs import track, views
from hpc_grpo.runs.attempts import with_accounting
from tests.paths import TESTS
from tests.unit.slurmfake import FakeSlurm, identity, make_run, sacct_line, squeue_line

RECORDS = json.loads((TESTS / "unit" / "records" / "slurm_causes.json").read_text())


def _recorded_states(job: str) -> list[str]:
    """Job ``job``'s records in the sacct output taken on the sandbox, oldest first."""
    rows = [line.split("|") for line in RECORDS["sacct_duplicates"]["output"][1:]]
    return [cols[1].split()[0] for cols in rows if cols[0] == job]


def test_recorded_states_of_the_probe_job() -> None:
    assert _recorded_states("1") == ["REQUEUED", "PREEMPTED", "NODE_FAIL", "CANCELLED"]


@pytest.mark.parametrize(("attempt", "cause", "shown", "state"), [
    ("slurm-1.0", "scontrol requeue", "scontrol requeue", "REQUEUED"),  # nothing to correct
    ("slurm-1.1", "scontrol requeue", "preempted", "PREEMPTED"),  # preempted by TERM alone
    ("slurm-1.1", "user signal", "user signal", "PREEMPTED"),  # precise causes stay
    ("slurm-1.2", "task crash", "node failure", "NODE_FAIL"),  # Slurm saw the node go
    ("slurm-1.2", "killed (no stop recorded)", "node failure", "NODE_FAIL"),  # node 0 lost
    ("slurm-1.2", "signal SIGTERM (Slurm gave no record)", "node failure", "NODE_FAIL"),
])
def test_a_vague_cause_takes_sacct_s_word(attempt: str, cause: str, shown: str, state: str) -> None:
    [row] = with_accounting([RestartLine(cause=cause, previous_attempt=attempt)], "1",
                            _recorded_states("1"))
    assert (row.cause, row.slurm_state) == (shown, state)


def test_other_jobs_and_unknown_attempts_are_left_alone() -> None:
    restarts = [RestartLine(cause="task crash", previous_attempt="slurm-9.2"),
                RestartLine(cause="task crash", previous_attempt="slurm-1.7"),
                RestartLine(cause="task crash", previous_attempt="local-1-abc"),
                RestartLine(cause="task crash")]
    assert with_accounting(restarts, "1", _recorded_states("1")) == restarts


def test_status_shows_the_accounted_causes(tmp_path: Path, fake: FakeSlurm) -> None:
    """A run with job 5 on another cluster's names: its attempt 0 was preempted (TERM only,
    recorded as a requeue), attempt 1 lost a node before Slurm noticed (a task crash)."""
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "5")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=6, job=job)
    (run_dir / "restarts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"cause": "scontrol requeue", "previous_attempt": "slurm-5.0", "steps_lost": 0},
        {"cause": "task crash", "previous_attempt": "slurm-5.1", "steps_lost": 2}]))
    ours = f"sbatch {job['script']}"
    fake.answer("sacct", sacct_line("5", "PREEMPTED", "2026-01-01T10:00:00", submit_line=ours)
                + sacct_line("5", "NODE_FAIL", "2026-01-01T10:10:00", submit_line=ours)
                + sacct_line("5", "RUNNING", "2026-01-01T10:20:00", submit_line=ours))
    fake.answer("squeue", squeue_line("5", "RUNNING", "2026-01-01T10:20:00",
                                      command=str(job["script"])))
    [row] = track.status()
    assert [(r["cause"], r["slurm_state"], r["steps_lost"]) for r in row.restarts] == [
        ("preempted", "PREEMPTED", 0), ("node failure", "NODE_FAIL", 2)]


def test_a_pending_requeue_shows_its_cause(tmp_path: Path, fake: FakeSlurm) -> None:
    """#27: job 5 was preempted twice; the second requeue waits in the queue, so no attempt
    recorded it in restarts.jsonl yet: status counted 2 restarts and showed one cause. The
    waiting one's cause is what the stopped attempt's node task put in state.json."""
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "5")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="interrupted", step=6, job=job)
    state = json.loads((run_dir / "state.json").read_text())
    (run_dir / "state.json").write_text(json.dumps({**state, "stop_cause": "preempted"}))
    (run_dir / "restarts.jsonl").write_text(json.dumps(
        {"cause": "preempted", "previous_attempt": "slurm-5.0", "steps_lost": 0}) + "\n")
    ours = f"sbatch {job['script']}"
    fake.answer("sacct", sacct_line("5", "PREEMPTED", "2026-01-01T10:00:00", submit_line=ours)
                + sacct_line("5", "PREEMPTED", "2026-01-01T10:10:00", submit_line=ours)
                + sacct_line("5", "PENDING", "2026-01-01T10:20:00", submit_line=ours))
    fake.answer("squeue", squeue_line("5", "PENDING", "2026-01-01T10:20:00",
                                      command=str(job["script"])))
    [row] = track.status()
    assert row.requeues == 2 and len(row.restarts) == 2
    assert (row.restarts[-1]["cause"], row.restarts[-1]["pending"]) == ("preempted", True)
    assert views._requeue_causes(row) == "preempted -0, preempted (pending)"


def test_a_pending_requeue_after_hpc_grpo_resume_still_shows(tmp_path: Path, fake: FakeSlurm) -> None:
    """restarts.jsonl spans the run's jobs: job 5's requeue, then the line `hpc-grpo resume`'s
    job 8 wrote at its start. Job 8 was then preempted and waits: Slurm counts 1 restart of job
    8, and none of the 2 lines is one of job 8's requeues, so the pending one must show (it was
    hidden: 1 restart against 2 lines of the run)."""
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "8")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="interrupted", step=9, job=job)
    state = json.loads((run_dir / "state.json").read_text())
    (run_dir / "state.json").write_text(json.dumps({**state, "stop_cause": "preempted"}))
    (run_dir / "restarts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"cause": "preempted", "attempt": "slurm-5.1", "previous_attempt": "slurm-5.0",
         "steps_lost": 0},
        {"cause": "failed", "attempt": "slurm-8.0", "previous_attempt": "slurm-5.1",
         "steps_lost": 0}]))
    ours = f"sbatch {job['script']}"
    fake.answer("sacct", sacct_line("8", "PREEMPTED", "2026-01-02T10:00:00", submit_line=ours)
                + sacct_line("8", "PENDING", "2026-01-02T10:20:00", submit_line=ours))
    fake.answer("squeue", squeue_line("8", "PENDING", "2026-01-02T10:20:00",
                                      command=str(job["script"])))
    [row] = track.status()
    # job 5's requeue and job 8's pending one; the resume is shown apart (issue #58)
    assert len(row.restarts) == 2 and len(row.resumes) == 1, row.restarts
    assert (row.restarts[-1]["cause"], row.restarts[-1]["pending"]) == ("preempted", True)
    assert row.restarts[-1]["stopped_at_step"] == 9
