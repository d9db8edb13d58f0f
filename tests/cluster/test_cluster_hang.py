"""A rank that blocks mid-step (issue #13), on the real sandbox cluster.

Rank 3 (second node) blocks inside its reward function in step 3 on the first attempt (the
test-only fault of runtime/rank/faults/hang.py); its peers wait for it in TRL's gather. The
watchdog, with bounds the test's own site profile sets small (start-up 120 s, 10 s once steps
are timed), must write every rank's Python stack to its log, show the run STALLED with rank 3
behind, end the attempt, and let the bounded retry requeue it from the step-2 checkpoint; the
run then finishes with every step logged once and nothing left running.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster.clusterlib import (
    CLI,
    RECIPE,
    cli,
    finished,
    rewards,
    submitted,
    wait_for,
    wait_no_processes,
)
from tests.paths import SITE_CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
STEPS = 8
HUNG = 3


def _site(tmp_path: Path) -> str:
    """The sandbox profile with small watchdog bounds, as a profile file of its own."""
    shipped = SITE_CONFIGS / "sandbox.yaml"
    path = tmp_path / "sandbox-hang.yaml"
    path.write_text(shipped.read_text() + "watchdog_startup_s: 120\nwatchdog_min_s: 10\n")
    return str(path)


def test_a_blocked_rank_is_dumped_shown_stalled_ended_and_retried(tmp_path: Path) -> None:
    env = dict(os.environ, HPC_GRPO_FAULT_HANG_RANK=str(HUNG), HPC_GRPO_FAULT_HANG_STEP="3")
    out = subprocess.run(
        [*CLI, "submit", "--output-root", str(tmp_path / "runs"), "--no-wait",
         "--site", _site(tmp_path), "--nodes", "2", "--recipe", str(RECIPE),
         "--set", f"max_steps={STEPS}", "--set", "save_steps=2"],
        capture_output=True, text=True, timeout=120, env=env, check=True).stdout
    run_id, job, run_dir = submitted(out)

    row = wait_for(run_id, lambda r: bool(r["stalled"]) or r["finished"], timeout=240,
                   every=1.0)
    table = cli("status", run_id).stdout  # before the next attempt's rank 0 clears it
    assert row["stalled_ranks"] == [HUNG], row
    assert f"rank {HUNG} behind at step 3" in row["stalled"], row
    assert "STALLED" in table and f"{run_id}: stalled: no progress for " in table, table

    row = wait_for(run_id, finished, timeout=240)
    assert row["state"] == "COMPLETED" and row["step"] == STEPS, row
    assert [s for s, _ in rewards(run_dir)] == list(range(1, STEPS + 1))  # each step once
    restarts = [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()]
    assert [(r["cause"], r["resumed_from_step"]) for r in restarts] == [("stalled", 2)], restarts
    assert len((run_dir / "retries.jsonl").read_text().splitlines()) == 1  # the bounded path
    state = json.loads((run_dir / "state.json").read_text())
    assert state["stalled"]["attempt"] == f"slurm-{job}.0"
    assert state["stalled"]["steps"] == [2, 2, 2, 2]
    for rank in range(4):  # faulthandler's dump, from both nodes, before any rank died
        log = (run_dir / "logs" / f"rank-{rank}.log").read_text()
        assert "(most recent call first):" in log and "Current thread 0x" in log, (rank, log[-2000:])
    hung = (run_dir / "logs" / f"rank-{HUNG}.log").read_text()
    assert "faults/hang.py" in hung and "in hanging" in hung
    nodes = "\n".join(p.read_text() for p in (run_dir / "submitit").glob(f"{job}_*_log.*"))
    assert "[watchdog] stalled: " in nodes and "[watchdog] SIGQUIT to ranks" in nodes
    assert wait_no_processes(str(run_dir)) == {}
