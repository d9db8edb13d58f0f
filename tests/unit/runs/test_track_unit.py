"""Tracking with fake Slurm binaries: a run's job is never taken by its number alone.

The configurations these were not written against are the point: job ids restarted (the same id,
another job), a run from another cluster sharing the home directory, requeue records mixed with
an older job's records under one id, sacct too old to say which script a job runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.runs import track
from tests.unit.slurmfake import FakeSlurm, identity, make_run, sacct_line, squeue_line

T0 = "2026-01-01T10:00:00"  # when the run's job was submitted
LATER = "2026-01-01T11:00:00"


def _only(rows: list[track.RunStatus]) -> track.RunStatus:
    assert len(rows) == 1, rows
    return rows[0]


def _jobs(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run_dir / "jobs.jsonl").read_text().splitlines()]


def test_job_id_restarted_finished_run_reports_from_its_run_directory(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    """The issue: the cluster restarted, job 2 is now someone's `sleep`; the run ended earlier."""
    run = make_run(tmp_path / "runs", "topo-check", phase="done", step=10,
                   job=identity(tmp_path / "runs" / "topo-check", "2"))
    fake.answer("sacct", sacct_line("2", "RUNNING", LATER, name="sleep",
                                    submit_line="sbatch --wrap sleep 600"))
    fake.answer("squeue", squeue_line("2", "RUNNING", LATER, name="sleep"))
    row = _only(track.status())
    assert (row.state, row.finished, row.source) == ("COMPLETED", True, "run directory")
    assert (row.step, row.max_steps, row.nodes) == (10, 10, "")  # not the sleep job's nodes
    assert "job 2 is now another job ('sleep', submitted 2026-01-01T11:00:00)" in row.note

    action = track.cancel("topo-check")
    assert not action.done and "nothing cancelled" in action.message
    assert "now another job ('sleep'" in action.message
    assert fake.calls("scancel") == []  # the sleep job is left alone
    assert [j["event"] for j in _jobs(run)] == ["submitted"]


def test_job_id_taken_by_another_hpc_grpo_run_with_the_same_name(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run = make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=4,
                   job=identity(tmp_path / "runs" / "grpo-tiny-0001", "7"))
    stranger = tmp_path / "elsewhere" / "grpo-tiny-0001" / "submitit" / ".submission_file_9.sh"
    fake.answer("sacct", "")
    fake.answer("squeue", squeue_line("7", "RUNNING", LATER, command=str(stranger)))
    row = _only(track.status())
    # same cluster, its id now someone else's: this run's job is over, training did not finish
    assert (row.state, row.finished, row.source, row.phase) == (
        "ENDED", True, "run directory", "training")
    for act in (track.cancel, track.requeue, lambda n: track.signal(n, "USR2")):
        assert not act("grpo-tiny-0001").done
    assert fake.calls("scancel") == fake.calls("scontrol") == []
    assert run.exists()


def test_a_requeued_job_is_still_the_runs_and_its_restarts_count(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "5")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=6, job=job)
    ours = f"sbatch {job['script']}"
    fake.answer("sacct",
                # an older job that had id 5 before the ids wrapped: newest by Submit, not ours
                sacct_line("5", "NODE_FAIL", "2026-01-01T12:00:00", name="grpo-tiny",
                           submit_line="sbatch /old/run/submitit/.submission_file_5.sh")
                + sacct_line("5", "PREEMPTED", T0, submit_line=ours)
                + sacct_line("5", "REQUEUED", "2026-01-01T10:10:00", submit_line=ours)
                + sacct_line("5", "RUNNING", "2026-01-01T10:20:00", submit_line=ours))
    fake.answer("squeue", squeue_line("5", "RUNNING", "2026-01-01T10:20:00",
                                      command=str(job["script"])))
    row = _only(track.status())
    assert (row.state, row.source, row.requeues, row.nodes, row.note) == (
        "RUNNING", "slurm", 2, "node[1-2]", "")

    action = track.cancel("grpo-tiny-0001")
    assert action.done and action.message == "cancelled job 5 (run grpo-tiny-0001)"
    assert [c["argv"] for c in fake.calls("scancel")] == [["--name=grpo-tiny", "5"]]
    assert [j["event"] for j in _jobs(run_dir)] == ["submitted", "cancelled"]
    assert track.requeue("grpo-tiny-0001").done
    assert [c["argv"] for c in fake.calls("scontrol")] == [["requeue", "5"]]
    assert track.signal("grpo-tiny-0001", "USR2").done
    assert fake.calls("scancel")[-1]["argv"] == ["--signal=USR2", "--name=grpo-tiny", "5"]


def test_a_run_of_another_cluster_is_not_given_this_clusters_job(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "5", cluster="alpha")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=3, job=job)
    fake.answer("sacct", sacct_line("5", "PENDING", LATER, cluster="sandbox",
                                    submit_line=f"sbatch {job['script']}"))
    fake.answer("squeue", squeue_line("5", "PENDING", LATER, cluster="sandbox",
                                      command=str(job["script"])))
    row = _only(track.status())
    assert (row.state, row.finished, row.source, row.cluster) == (
        "UNKNOWN", False, "run directory", "alpha")
    assert "on cluster alpha; this is cluster sandbox" in row.note
    with pytest.raises(UserError, match="on cluster alpha; this is cluster sandbox"):
        track.cancel("grpo-tiny-0001")
    assert fake.calls("scancel") == []


def test_a_run_recorded_before_identities_is_checked_by_its_folder(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run = make_run(tmp_path / "runs", "old-0001", phase="training", step=2, job={"job_id": "3"})
    fake.answer("sacct", "")
    fake.answer("squeue", squeue_line("3", "RUNNING", LATER,
                                      command=f"{run}/submitit/.submission_file_ab12.sh"))
    assert _only(track.status()).state == "RUNNING"
    assert track.cancel("old-0001").done
    fake.answer("squeue", squeue_line("3", "RUNNING", LATER,
                                      command=f"/x{run}/submitit/.submission_file_ab12.sh"))
    assert _only(track.status()).source == "run directory"  # a look-alike path is not ours
    assert not track.cancel("old-0001").done
    assert len(fake.calls("scancel")) == 1


def test_without_a_script_to_compare_status_shows_but_actions_refuse(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=2,
             job=identity(run_dir, "4"))
    # sacct before 22.05 (no SubmitLine), squeue without a Command for the job
    fake.answer("sacct", "4|RUNNING|n1|00:00:10|0:0|None|2026-01-01T10:00:00|grpo-tiny|sandbox\n")
    fake.answer("squeue", squeue_line("4", "RUNNING", T0))
    row = _only(track.status())
    assert (row.state, row.source) == ("RUNNING", "slurm")
    assert "not confirmed" in row.note
    with pytest.raises(UserError, match="cannot tell that job 4 is run grpo-tiny-0001's") as info:
        track.cancel("grpo-tiny-0001")
    assert "nothing was cancelled" in info.value.hint
    # sacct's record of a pending job: named "allocation", no SubmitLine: evidence of nothing
    fake.answer("sacct", "4|PENDING||00:00:00|0:0|None|2026-01-01T10:00:00|allocation|sandbox|\n")
    fake.answer("squeue", "")
    row = _only(track.status())
    assert (row.state, row.source) == ("UNKNOWN", "run directory")
    assert "record of job 4 names neither its script nor its job" in row.note
    # ... but an older job under the id, or another name, is ruled out without a script
    fake.answer("sacct", "4|COMPLETED|n1|00:00:10|0:0|None|2025-12-31T10:00:00|grpo-tiny|sandbox\n")
    fake.answer("squeue", squeue_line("4", "RUNNING", LATER, name="wrap"))
    assert _only(track.status()).source == "run directory"
    assert fake.calls("scancel") == []


def test_cancel_of_a_job_that_already_ended_or_was_forgotten(fake: FakeSlurm, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "6")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="done", step=10, job=job)
    fake.answer("squeue", squeue_line("6", "COMPLETED", T0, command=str(job["script"])))
    action = track.cancel("grpo-tiny-0001")
    assert not action.done and "already ended (COMPLETED)" in action.message
    fake.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert "Slurm no longer has job 6" in track.cancel("grpo-tiny-0001").message
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(UserError, match="cannot check that job 6 is run grpo-tiny-0001's"):
        track.cancel("grpo-tiny-0001")
    assert fake.calls("scancel") == []


def test_a_run_without_a_job(fake: FakeSlurm, tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "nojob-0001")
    with pytest.raises(UserError, match="has no job"):
        track.cancel("nojob-0001")
    row = _only(track.status())
    assert (row.job_id, row.state, row.source) == ("", "UNKNOWN", "run directory")
    assert fake.calls() == []  # nothing to ask Slurm


def test_one_batched_query_for_every_run(fake: FakeSlurm, tmp_path: Path) -> None:
    for i in range(30):
        run_dir = tmp_path / "runs" / f"r-{i:04d}"
        make_run(tmp_path / "runs", f"r-{i:04d}", phase="training", step=1,
                 job=identity(run_dir, str(100 + i)))
    rows = track.status()
    assert len(rows) == 30 and len(fake.calls("sacct")) == len(fake.calls("squeue")) == 1
    assert all(r.source == "run directory" and "no longer knows" in r.note for r in rows)


def test_a_pending_stranger_under_the_id_is_no_evidence_for_the_run(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    """Seen on the sandbox: sacct's record of someone's pending `--wrap` job names neither
    script nor job ("allocation"), squeue's has no Command: neither may pass for the run's."""
    make_run(tmp_path / "runs", "check-0001", phase="done", step=10,
             job=identity(tmp_path / "runs" / "check-0001", "10"))
    fake.answer("sacct", "10|PENDING||00:00:00|0:0|None|2026-01-01T11:00:00|allocation|sandbox|\n")
    fake.answer("squeue", squeue_line("10", "PENDING", LATER, name="sleep", nodes=""))
    row = _only(track.status())
    assert (row.state, row.finished, row.source) == ("COMPLETED", True, "run directory")
    assert "job 10 is now another job ('sleep'" in row.note
    assert not track.cancel("check-0001").done and fake.calls("scancel") == []


def test_a_cancelled_run_shows_cancelled_once_slurm_forgot_its_job(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Issue #58: a run cancelled with hpc-grpo cancel, then forgotten by Slurm, showed UNKNOWN*
    (phase interrupted); so did one cancelled with scancel, whose node task recorded
    stop_cause "cancelled". Both are CANCELLED, from the run directory."""
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    job = identity(run_dir, "5")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=3, job=job)
    fake.answer("squeue", squeue_line("5", "RUNNING", T0, command=str(job["script"])))
    assert track.cancel("grpo-tiny-0001").done
    fake.answer("sacct", "")
    fake.answer("squeue", "")  # forgotten
    (run_dir / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 3}))
    row = _only(track.status())
    assert (row.state, row.finished, row.source) == ("CANCELLED", True, "run directory")

    other = tmp_path / "runs" / "grpo-tiny-0002"  # scancel outside hpc-grpo: no jobs.jsonl line
    make_run(tmp_path / "runs", "grpo-tiny-0002", job=identity(other, "6"))
    submitted = _jobs(other)[0]["time"]
    (other / "state.json").write_text(json.dumps({
        "phase": "interrupted", "step": 2, "stop_cause": "cancelled", "started": submitted + 1}))
    row = _only(track.status(["grpo-tiny-0002"]))
    assert (row.state, row.finished, row.source) == ("CANCELLED", True, "run directory")
    # an earlier job's cancel (this job, a resume, has not started yet) is not this job's
    (other / "state.json").write_text(json.dumps({
        "phase": "interrupted", "step": 2, "stop_cause": "cancelled", "started": submitted - 60}))
    assert _only(track.status(["grpo-tiny-0002"])).state == "UNKNOWN"


def test_a_resume_by_the_user_is_shown_once_and_not_as_a_requeue(
        fake: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #58: after hpc-grpo resume, status said "requeues: user signal -0" and rq 1: the
    resumed job's first restart line (its previous attempt another job's) counted as a requeue.
    A resume is the user's, not Slurm's or the node task's: shown once, apart from requeues."""
    from hpc_grpo.runs import views

    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=6,
             job=identity(run_dir, "5"))
    job = identity(run_dir, "7", submit=LATER)
    (run_dir / "jobs.jsonl").open("a").write(json.dumps(
        {**job, "event": "submitted", "time": 2.0, "resumed_from_job": "5",
         "resumed_from_step": 3}) + "\n")
    (run_dir / "restarts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in (
        {"attempt": "slurm-7.0", "previous_attempt": "slurm-5.0", "cause": "user signal",
         "stopped_at_step": 3, "resumed_from_step": 3, "steps_lost": 0},
        {"attempt": "slurm-7.1", "previous_attempt": "slurm-7.0", "cause": "preempted",
         "stopped_at_step": 5, "resumed_from_step": 5, "steps_lost": 0})))
    ours = f"sbatch {job['script']}"
    fake.answer("sacct", sacct_line("7", "PREEMPTED", LATER, submit_line=ours)
                + sacct_line("7", "RUNNING", "2026-01-01T11:10:00", submit_line=ours))
    fake.answer("squeue", squeue_line("7", "RUNNING", "2026-01-01T11:10:00",
                                      command=str(job["script"])))
    row = _only(track.status())
    assert row.requeues == 1 and [r["cause"] for r in row.restarts] == ["preempted"]
    assert row.resumed == "resumed by the user from step 3" and len(row.resumes) == 1
    views.status_table([row])
    out = capsys.readouterr().out
    assert "grpo-tiny-0001: requeues: preempted -0" in out and "user signal" not in out
    assert out.count("resumed by the user from step 3") == 1


def test_a_job_resubmitted_without_a_dead_node_is_followed_as_a_requeue(fake: FakeSlurm,
                                                                         tmp_path: Path) -> None:
    """#60: the node task submitted job 8 in place of job 5, whose second node died (its line
    names ``resubmitted_from_job``). Status and cancel follow job 8, and its first restart is a
    requeue with the node task's cause, not a user's resume."""
    run_dir = tmp_path / "runs" / "grpo-tiny-0001"
    old = identity(run_dir, "5")
    make_run(tmp_path / "runs", "grpo-tiny-0001", phase="training", step=9, job=old)
    (run_dir / "jobs.jsonl").open("a").write(json.dumps(
        {**identity(run_dir, "8", submit=LATER), "script": old["script"], "event": "submitted",
         "time": 2.0, "resubmitted_from_job": "5", "excluded_nodes": ["node2"]}) + "\n")
    (run_dir / "restarts.jsonl").write_text(json.dumps(
        {"attempt": "slurm-8.0", "previous_attempt": "slurm-5.0", "cause": "node failure",
         "stopped_at_step": 7, "resumed_from_step": 4, "steps_lost": 3}) + "\n")
    ours = f"sbatch {old['script']}"
    fake.answer("sacct", sacct_line("8", "RUNNING", LATER, submit_line=ours))
    fake.answer("squeue", squeue_line("8", "RUNNING", LATER, command=str(old["script"])))
    row = _only(track.status())
    assert (row.job_id, row.state) == ("8", "RUNNING")
    assert row.requeues == 1 and [r["cause"] for r in row.restarts] == ["node failure"]
    assert row.resumed == "" and row.resumes == ()
    track.cancel("grpo-tiny-0001")
    assert [c["argv"][-1] for c in fake.calls("scancel")] == ["8"]
