"""The control plane end to end on the real sandbox Slurm cluster (4 namespace nodes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.clusterlib import (
    RECIPE,
    cli,
    finished,
    submit,
    submitted,
    wait_for,
    wait_no_processes,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]


def test_two_node_check_job(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    rendered = cli("render", "--site", "sandbox", "--model", "builtin:tiny", "--nodes", "2",
                   "--payload", "check", "--output-root", str(root), "--run-id", "ctl-0001").stdout
    run_id, job_id, run_dir = submit(root, "--site", "sandbox", "--model", "builtin:tiny",
                                     "--nodes", "2", "--payload", "check", "--run-id", "ctl-0001")
    assert run_id == "ctl-0001"
    received = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"],
                              capture_output=True, text=True, check=True).stdout
    assert received == rendered == (run_dir / "job.sbatch").read_text()

    seen: list[str] = []
    row = wait_for(run_id, finished, seen=seen)
    assert row["state"] == "COMPLETED", row
    assert seen[-1] == "COMPLETED" and any(s in ("PENDING", "RUNNING") for s in seen), seen

    ranks = [json.loads((run_dir / "check" / f"rank-{r}.json").read_text()) for r in range(4)]
    hostnames = [r["hostname"] for r in ranks]
    assert hostnames[0] == hostnames[1] != hostnames[2] == hostnames[3]
    assert {r["master_addr"] for r in ranks} == {hostnames[0]}
    assert len({r["master_port"] for r in ranks}) == 1
    assert 21000 <= int(ranks[0]["master_port"]) <= 21999
    assert all(r["allreduce"] == r["expected"] == 10 for r in ranks)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]

    logs = cli("logs", run_id).stdout
    for rank in range(4):
        assert f"[rank-{rank}]" in logs
    one = cli("logs", run_id, "--rank", "2").stdout
    assert one and all(line.startswith("[rank-2]") for line in one.splitlines())


def test_cancel_leaves_nothing_then_resume_continues(tmp_path: Path) -> None:
    """A cancelled run (no requeue) resumes as a new job in its run directory: from its newest
    complete checkpoint (or step 0) to max_steps, each step logged once."""
    root = tmp_path / "runs"
    run_id, job, run_dir = submit(root, "--site", "sandbox", "--model", "builtin:tiny",
                                  "--nodes", "2", "--recipe", str(RECIPE),
                                  "--set", "max_steps=100000")
    wait_for(run_id, lambda r: r["state"] == "RUNNING" and r["step"] >= 1, timeout=240)
    refused = cli("resume", run_id, check=False)
    assert refused.returncode == 2 and f"is still RUNNING as job {job}" in refused.stderr
    cli("cancel", run_id)
    row = wait_for(run_id, finished, timeout=60)
    assert row["state"] == "CANCELLED"
    assert wait_no_processes(str(run_dir)) == {}

    from hpc_grpo.rundir.checkpoints import newest_complete_step

    start = newest_complete_step(run_dir) or 0
    out = cli("resume", run_id, "--set", f"max_steps={start + 4}").stdout
    _, new_job, same_dir = submitted(out)
    assert new_job != job and same_dir == run_dir and f"after job {job}" in out, out
    row = wait_for(run_id, lambda r: r["job_id"] == new_job and r["finished"], timeout=240)
    assert row["state"] == "COMPLETED" and row["step"] == start + 4, row
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, start + 5))  # nothing repeated, nothing lost
    # a resume by the user is not a requeue (#58): shown once, apart from Slurm's requeues
    assert row["resumes"][-1]["resumed_from_step"] == start and row["requeues"] == 0, row
    assert (run_dir / "attempts" / f"01-job-{job}" / "job.sbatch").exists()
    assert wait_no_processes(str(run_dir)) == {}


def test_local_site_runs_same_payload(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = cli("submit", "--site", "local", "--model", "builtin:tiny", "--payload", "check",
               "--output-root", str(root), "--wait", timeout=180)
    run_dir = submitted(proc.stdout)[2]
    ranks = [json.loads(p.read_text()) for p in sorted((run_dir / "check").glob("rank-*.json"))]
    assert len(ranks) == 2 and all(r["allreduce"] == r["expected"] == 3 for r in ranks)
    assert ranks[0]["master_addr"] == "127.0.0.1"
    assert "COMPLETED" in proc.stderr
