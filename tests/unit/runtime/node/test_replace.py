"""A job that lost a node for good submits its successor without it (#60, runtime/node/replace.py):
the pure parts, and the order of Slurm calls against fake binaries (the sandbox cluster test,
tests/cluster/test_cluster_dead_node.py, shows what Slurm does with them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.rundir.view import JobLine, append_job_line
from hpc_grpo.runtime.node import replace
from tests.unit.slurmfake import install

RECORD = ("JobId=8 JobName=grpo-tiny UserId=root(0) JobState=PENDING Reason=Dependency "
          "Dependency=afterany:5(unfulfilled) SubmitTime=2026-12-03T16:47:05 "
          "ExcNodeList=(null) Command={script} WorkDir=/tmp")


def test_sbatch_gets_the_submit_environment_not_the_old_jobs() -> None:
    env = {"PATH": "/bin", "HOME": "/root", "SLURM_CONF": "/etc/slurm/x.conf",
           "SLURM_JOB_ID": "5", "SLURM_MEM_PER_CPU": "100", "SLURMD_NODENAME": "node1",
           "SBATCH_PARTITION": "low", "SRUN_DEBUG": "3", "SUBMITIT_FOLDER": "/r/submitit",
           "HPC_GRPO_RUN_DIR": "/r"}
    assert replace.submit_env(env) == {"PATH": "/bin", "HOME": "/root", "HPC_GRPO_RUN_DIR": "/r",
                                       "SLURM_CONF": "/etc/slurm/x.conf"}


def test_the_new_job_avoids_every_dead_node_and_waits_on_the_old_job() -> None:
    assert replace.excluded("(null)", ["node2"]) == ["node2"]
    assert replace.excluded("node4,node2", ["node3"]) == ["node2", "node3", "node4"]
    assert replace.sbatch_argv("/r/s.sh", ["node2", "node3"], "5") == [
        "--exclude=node2,node3", "--dependency=afterany:5", "/r/s.sh"]


def test_retries_are_shared_along_the_chain_of_resubmitted_jobs() -> None:
    jobs = [JobLine("5", "submitted"), JobLine("8", "submitted", resubmitted_from_job="5"),
            JobLine("9", "submitted", resubmitted_from_job="8"), JobLine("12", "submitted")]
    assert replace.job_chain(jobs, "9") == {"9", "8", "5"}
    assert replace.job_chain(jobs, "12") == {"12"}  # a user's resume counts afresh
    looped = [JobLine("8", resubmitted_from_job="9"), JobLine("9", resubmitted_from_job="8")]
    assert replace.job_chain(looped, "9") == {"8", "9"}  # a damaged ledger never loops


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory whose job 5 runs `<run>/submitit/.submission_file_x.sh`."""
    run_dir = tmp_path / "run"
    folder = run_dir / "submitit"
    folder.mkdir(parents=True)
    script = folder / ".submission_file_x.sh"
    script.write_text("#!/bin/bash\n")
    (folder / "5_submitted.pkl").write_bytes(b"pickle of the node task")
    append_job_line(run_dir, "5", "submitted", script=str(script), job_name="grpo-tiny")
    return run_dir, script


def test_submit_hand_over_cancel_release_in_that_order(
        run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, script = run
    fake = install(tmp_path, monkeypatch)
    fake.answer("sbatch", "8\n")
    fake.answer("scontrol", RECORD.format(script=script) + "\n")
    monkeypatch.setenv("FAKE_SLURM_RECORD_ENV", "SLURM_JOB_ID,SLURM_CONF")
    env = {"PATH": str(tmp_path / "fake-bin") + ":/usr/bin:/bin", "SLURM_JOB_ID": "5",
           "SLURM_CONF": "/etc/slurm/slurm.conf", "SUBMITIT_FOLDER": str(script.parent),
           "FAKE_SLURM_DIR": str(fake.dir), "FAKE_SLURM_RECORD_ENV": "SLURM_JOB_ID,SLURM_CONF"}

    done = replace.replace(run_dir, "5", ["node2"], env)

    assert done == replace.Replacement("8")
    order = [(c["name"], c["argv"][:2]) for c in fake.calls() if c["argv"][:1] != ["show"]]
    assert order == [("sbatch", ["--parsable", "--exclude=node2"]), ("scancel", ["5"]),
                     ("scontrol", ["update", "JobId=8"])]
    sbatch = fake.calls("sbatch")[0]
    assert sbatch["argv"][2:] == ["--dependency=afterany:5", str(script)]
    assert sbatch["env"] == {"SLURM_CONF": "/etc/slurm/slurm.conf"}  # not the old job's id
    assert fake.calls("scontrol")[-1]["argv"] == ["update", "JobId=8", "Dependency="]
    assert (script.parent / "8_submitted.pkl").read_bytes() == b"pickle of the node task"
    line = json.loads((run_dir / "jobs.jsonl").read_text().splitlines()[-1])
    assert (line["job_id"], line["event"], line["script"], line["resubmitted_from_job"],
            line["excluded_nodes"], line["submit_time"], line["job_name"]) == (
        "8", "submitted", str(script), "5", ["node2"], "2026-12-03T16:47:05", "grpo-tiny")


def test_nothing_is_submitted_without_the_old_jobs_pickle(
        run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, script = run
    (script.parent / "5_submitted.pkl").unlink()
    fake = install(tmp_path, monkeypatch)
    done = replace.replace(run_dir, "5", ["node2"], {"SUBMITIT_FOLDER": str(script.parent)})
    assert not done.job_id and "5_submitted.pkl is missing" in done.problem and done.requeue
    assert fake.calls() == []


def test_a_refused_sbatch_leaves_the_old_job_alone(
        run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, script = run
    fake = install(tmp_path, monkeypatch)
    fake.answer("sbatch", err="sbatch: error: Batch job submission failed: Access denied", rc=1)
    done = replace.replace(run_dir, "5", ["node2"], {"PATH": str(tmp_path / "fake-bin"),
                                                     "FAKE_SLURM_DIR": str(fake.dir)})
    assert not done.job_id and "Access denied" in done.problem
    assert fake.calls("scancel") == [] and len((run_dir / "jobs.jsonl").read_text().splitlines()) == 1


def test_an_old_job_that_cannot_be_cancelled_keeps_the_new_one_waiting(
        run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dependency stays: the new job starts when Slurm ends the old one, never beside it."""
    run_dir, script = run
    fake = install(tmp_path, monkeypatch)
    fake.answer("sbatch", "8\n")
    fake.answer("scancel", err="scancel: error: Kill job error on job id 5", rc=1)
    done = replace.replace(run_dir, "5", ["node2"], {"PATH": str(tmp_path / "fake-bin"),
                                                     "FAKE_SLURM_DIR": str(fake.dir)})
    assert done.job_id == "8" and "waits for it" in done.problem
    assert not [c for c in fake.calls("scontrol") if c["argv"][:1] == ["update"]]


def test_a_users_cancel_of_the_old_job_takes_the_new_one_too(
        run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpc-grpo cancel` read jobs.jsonl before the new job's line and cancelled the old job:
    the run is to stop, so the new job is cancelled, never released."""
    run_dir, script = run
    fake = install(tmp_path, monkeypatch)
    fake.answer("sbatch", "8\n")
    append_job_line(run_dir, "5", "cancelled")
    done = replace.replace(run_dir, "5", ["node2"], {"PATH": str(tmp_path / "fake-bin"),
                                                     "FAKE_SLURM_DIR": str(fake.dir)})
    assert not done.job_id and "cancelled by the user" in done.problem and not done.requeue
    assert [c["argv"] for c in fake.calls("scancel")] == [["5"], ["8"]]
    assert not [c for c in fake.calls("scontrol") if c["argv"][:1] == ["update"]]
