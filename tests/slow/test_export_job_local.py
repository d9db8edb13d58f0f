"""`hpc-grpo export --job` on the local back end, end to end: a real tiny run on this machine,
then its export started as a local job (the script in the run directory, run by the back end in
a session of its own), the real torch export and check in that job, and `status` following the
job from running to the export it recorded. The Slurm argv is tests/unit/export/test_export_job.py's
(fake binaries); the sandbox cluster's is tests/cluster/test_cluster_export_job.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted
from tests.paths import REPO
from tests.slow.runtime_slow_helpers import cli


@pytest.mark.slow
def test_a_local_export_job_writes_the_checked_export_and_status_follows_it(tmp_path: Path) -> None:
    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = cli("submit", "--site", "local", "--model", "builtin:tiny", "--set", "max_steps=2",
                "--output-root", str(tmp_path / "runs"), "--run-id", "job-0001", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = submitted(proc.stdout)[2]
    started = cli("export", "job-0001", "--job", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith("export runs as job ") and "(--job)" in started.stdout
    entry = json.loads((run_dir / "export-jobs.jsonl").read_text())
    assert entry["scheduler"] == "local" and entry["step"] == 2
    lines = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        row = json.loads(cli("status", str(run_dir), "--json", env=env).stdout)[0]
        lines.append(row["export_job"])
        if "done" in row["export_job"] or "no export recorded" in row["export_job"]:
            break
        time.sleep(1)
    target = run_dir / "export" / "step-2"
    assert lines[-1] == f"export job {entry['job_id']} (step 2): done, {target}", lines
    assert (target / "model.safetensors").is_file() and (target / "README.md").is_file()
    export = json.loads((run_dir / "exports.jsonl").read_text().splitlines()[-1])
    assert export["check"]["max_abs_diff"] <= export["check"]["tolerance"]
    log = (run_dir / "logs" / "export-job-1.log").read_text()
    assert f"exported {target}" in log
