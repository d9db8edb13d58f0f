"""What tells one job from another under the same id: the records hpc_grpo.scheduler.slurm asks for
and slurm_records reads (cluster, submit time, name, script path), the submission it records,
and the guards on actions."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.scheduler import slurm, slurm_records
from tests.unit.slurmfake import FakeSlurm, sacct_line, squeue_line


def test_sacct_records_keep_every_record_with_its_identity() -> None:
    text = (sacct_line("5", "COMPLETED", "2026-01-01T09:00:00", name="old",
                       submit_line="sbatch /a/run/submitit/.submission_file_1.sh")
            + sacct_line("5", "REQUEUED", "2026-01-02T10:00:00",
                         submit_line="sbatch /b/odd|dir/submitit/.submission_file_2.sh")
            + sacct_line("5", "RUNNING", "2026-01-02T10:05:00",
                         submit_line="sbatch /b/odd|dir/submitit/.submission_file_2.sh")
            + "5.batch|COMPLETED|n1|00:00:01|0:0|None|2026-01-02T10:00:00|batch|sandbox|\n")
    records = slurm_records.parse_sacct_records(text)["5"]
    assert [(r.name, r.state.state, r.cluster) for r in records] == [
        ("old", "COMPLETED", "sandbox"), ("grpo-tiny", "REQUEUED", "sandbox"),
        ("grpo-tiny", "RUNNING", "sandbox")]
    assert records[1].command == "sbatch /b/odd|dir/submitit/.submission_file_2.sh"  # '|' kept
    assert records[0].submit == "2026-01-01T09:00:00"
    # all of them, by id alone: the other job's COMPLETED record is no restart
    folded = slurm_records.fold_sacct(records)
    assert (folded.state, folded.restarts) == ("RUNNING", 1)
    assert slurm_records.fold_sacct(records[1:]).restarts == 1
    # the seven columns of sacct before SubmitLine/JobName/Cluster still read
    old = slurm_records.parse_sacct_records("7|FAILED|n1|00:00:02|1:0|None|2026-01-01T00:00:00\n")["7"][0]
    assert (old.state.state, old.name, old.cluster, old.command) == ("FAILED", "", "", "")


def test_squeue_records_read_the_format_squeue_is_asked_for() -> None:
    assert slurm_records.SQUEUE_FORMAT.endswith("Name:|,Command:")
    text = (squeue_line("8", "RUNNING", "2026-01-01T10:00:00",
                        command="/r/submitit/.submission_file_x.sh")
            + squeue_line("9", "PENDING", "2026-01-01T10:01:00", name="wrap", nodes=""))
    got = slurm_records.parse_squeue_records(text)
    assert (got["8"].cluster, got["8"].name, got["8"].command) == (
        "sandbox", "grpo-tiny", "/r/submitit/.submission_file_x.sh")
    assert (got["9"].state.state, got["9"].command, got["9"].state.nodes) == ("PENDING", "", "")
    assert got["8"].state.state == "RUNNING"


def test_query_records_says_when_slurm_cannot_be_asked(fake: FakeSlurm) -> None:
    fake.answer("sacct", err="sacct: error: Problem talking to the database\n", rc=1)
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    records = slurm.query_records(["5", "not-an-id"])
    assert records.unreachable is not None and "database" in records.unreachable.message
    assert "--jobs=5" in fake.calls("squeue")[0]["argv"]
    fake.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    records = slurm.query_records(["5"])  # squeue refusing an id it forgot is not a failure
    assert records.unreachable is None and records.squeue_error is None
    assert slurm.query_records(["--all"]) == slurm_records.JobRecords({}, {})


def test_sacct_without_submit_line_is_asked_again_without_it(fake: FakeSlurm) -> None:
    fake.answer("sacct", err='sacct: error: Invalid field requested: "SubmitLine"\n', rc=1)
    records = slurm.query_records(["5"])
    formats = [next(a for a in c["argv"] if a.startswith("--format=")) for c in fake.calls("sacct")]
    assert formats == [f"--format={slurm_records.SACCT_FIELDS}",
                       "--format=JobID,State,NodeList,Elapsed,ExitCode,Reason,Submit,JobName,Cluster"]
    assert records.sacct_error is not None  # the fake fails both times


def _script(folder: Path, python: str = "/opt/venv/bin/python") -> str:
    return textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --job-name=grpo-tiny
        #SBATCH --nodes=2
        export SUBMITIT_EXECUTOR=slurm
        srun --unbuffered {slurm.submitit_command(python, folder)}
        """)


def test_submit_job_records_the_script_path_and_slurms_first_record(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    folder = tmp_path / "run" / "submitit"
    fake.answer("squeue", squeue_line("4242", "PENDING", "2026-01-01T10:00:00", cluster="alpha",
                                      command="/from/squeue.sh"))
    job = slurm.submit_job(script_text=_script(folder), folder=folder,
                           task=functools.partial(print), nodes=2, timeout_min=30,
                           max_requeues=1, python="/opt/venv/bin/python")
    (call,) = fake.calls("sbatch")
    assert call["argv"] == [job.script]  # nothing added to what sbatch gets
    assert job.script.startswith(f"{folder}/.submission_file_") and job.script.endswith(".sh")
    assert Path(job.script).resolve() == folder / "4242_submission.sh"
    assert (job.job_id, job.name) == ("4242", "grpo-tiny")
    assert job.record is not None and (job.record.cluster, job.record.submit) == (
        "alpha", "2026-01-01T10:00:00")
    assert "--jobs=4242" in fake.calls("squeue")[0]["argv"]
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    again = slurm.submit_job(script_text=_script(folder), folder=folder,
                             task=functools.partial(print), nodes=2, timeout_min=30,
                             max_requeues=1, python="/opt/venv/bin/python")
    assert again.record is None and again.script != job.script  # a fresh name per submission


def test_actions_carry_the_job_name_as_a_last_guard(fake: FakeSlurm) -> None:
    slurm.cancel("11", name="grpo-tiny")
    slurm.cancel("12", name="a,b")  # scancel would read a list: left to the caller's check
    slurm.signal_job("13", "USR2", name="grpo-tiny")
    assert [c["argv"] for c in fake.calls("scancel")] == [
        ["--name=grpo-tiny", "11"], ["12"], ["--signal=USR2", "--name=grpo-tiny", "13"]]


def test_live_record(fake: FakeSlurm) -> None:
    fake.answer("squeue", squeue_line("21", "RUNNING", "2026-01-01T10:00:00"))
    record = slurm.live_record("21")
    assert record is not None and record.state.state == "RUNNING"
    assert slurm.live_record("22") is None  # squeue printed another job only
    fake.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert slurm.live_record("21") is None
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(UserError, match="Unable to contact"):
        slurm.live_record("21")
    with pytest.raises(UserError, match="not a Slurm job id"):
        slurm.live_record("21 --all")


