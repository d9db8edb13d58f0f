"""`hpc-grpo export --job` on the real sandbox Slurm (#28): a one-node tiny run trains, then its
export runs as an sbatch job of one node with the plan's memory, writes the checked export
from the compute node, and `status` follows the job to it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cluster.clusterlib import RECIPE, cli, status, submit, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]


def test_export_runs_as_a_slurm_job_and_status_follows_it(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_id, _, run_dir = submit(root, "--site", "sandbox", "--nodes", "1", "--recipe", str(RECIPE),
                                "--set", "max_steps=2", "--run-id", "xjob-0001")
    row = wait_for(run_id, lambda r: bool(r["finished"]), timeout=300)
    assert row["state"] == "COMPLETED", row
    started = cli("export", run_id, "--job")
    assert started.stdout.startswith("export runs as job "), started.stdout + started.stderr
    entry = json.loads((run_dir / "export-jobs.jsonl").read_text())
    assert entry["scheduler"] == "slurm" and entry["job_id"].isdigit()
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = status(run_id)["export_job"]
        if not seen or seen[-1] != line:
            seen.append(line)
        if ": done, " in line or "no export recorded" in line:
            break
        time.sleep(1.0)
    target = run_dir / "export" / "step-2"
    assert seen[-1] == f"export job {entry['job_id']} (step 2): done, {target}", seen
    assert (target / "model.safetensors").is_file()
    log = Path(entry["log"]).read_text()
    assert f"exported {target}" in log, log[-2000:]
