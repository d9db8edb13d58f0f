"""A run's job is known by more than its number, on the real sandbox Slurm cluster.

The case from the issue without restarting the shared cluster: a finished run whose job id now
names someone else's job (after a restart, ids start again at 1). The run keeps the identity its
real submission recorded; only the number is moved onto a stranger's `sleep` job.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.clusterlib import cli, finished, submit, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]


def _squeue_state(job_id: str) -> str:
    return subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}",
                           "--format=%T"], capture_output=True, text=True).stdout.strip()


def test_a_job_id_now_someone_elses_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_id, job_id, run_dir = submit(root, "--site", "sandbox", "--model", "builtin:tiny",
                                     "--nodes", "2", "--payload", "check")
    jobs_file = run_dir / "jobs.jsonl"
    (line,) = [json.loads(x) for x in jobs_file.read_text().splitlines()]
    assert (line["job_id"], line["cluster"], line["job_name"]) == (job_id, "sandbox", "grpo-tiny")
    assert line["script"].startswith(f"{run_dir}/submitit/.submission_file_")
    assert line["submit_time"]  # Slurm's own, read back right after sbatch
    row = wait_for(run_id, finished)
    assert (row["state"], row["source"], row["note"]) == ("COMPLETED", "slurm", "")

    stranger = subprocess.run(
        ["sbatch", "--parsable", "--job-name=sleep", "--partition=debug", "--nodes=1",
         "--cpus-per-task=1", "--time=00:03:00", "--output=/dev/null", "--wrap", "sleep 170"],
        capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        jobs_file.write_text(json.dumps({**line, "job_id": stranger}) + "\n")
        row = json.loads(cli("status", "--json", str(run_dir)).stdout)[0]
        assert (row["job_id"], row["state"], row["finished"], row["source"]) == (
            stranger, "COMPLETED", True, "run directory")
        assert f"job {stranger} is now another job ('sleep'" in row["note"]
        assert row["nodes"] == ""  # not the sleep job's node

        proc = cli("cancel", str(run_dir))
        assert "nothing cancelled" in proc.stdout and f"job {stranger}" in proc.stdout
        assert _squeue_state(stranger) in ("PENDING", "RUNNING")  # untouched
        table = cli("status", str(run_dir)).stdout
        assert "COMPLETED*" in table and "is now another job" in table
    finally:
        subprocess.run(["scancel", stranger], check=False)
