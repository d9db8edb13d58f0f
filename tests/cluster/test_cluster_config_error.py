"""A configuration error found only on the nodes (issue #13), on the real sandbox cluster.

`auto_find_batch_size: true` is a valid bool to the login node's checks (types, allowed values,
ranges) but GRPOConfig's own __post_init__ refuses it, on every rank alike, before the first step.
(It was `log_completions_hub_repo` without `log_completions`, until recipes learnt to drop hub
upload keys with a warning on the login node, #14.) It used to be requeued three times as
"node failure" and end COMPLETED 0:0; now: one attempt, Slurm's FAILED, and `status` names the
cause and TRL's line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.clusterlib import RECIPE, cli, finished, submit, wait_for, wait_no_processes

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]

TRL_SAYS = "ValueError: auto_find_batch_size is not supported by GRPO"


def test_a_value_only_trl_refuses_fails_once_and_status_says_why(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_id, job, run_dir = submit(root, "--site", "sandbox", "--nodes", "2", "--recipe",
                                  str(RECIPE), "--set", "max_steps=4",
                                  "--set", "auto_find_batch_size=true",
                                  "--run-id", "cfgerr-0001")
    row = wait_for(run_id, finished, timeout=300)
    log = (run_dir / "logs" / "rank-0.log").read_text()[-3000:]
    assert (row["state"], row["source"]) == ("FAILED", "slurm"), (row, log)  # not COMPLETED 0:0
    assert row["requeues"] == 0, row
    assert row["cause"] == "configuration error", (row, log)
    assert row["message"].startswith(TRL_SAYS), row

    state = json.loads((run_dir / "state.json").read_text())
    assert state["attempt"] == f"slurm-{job}.0"  # the only attempt: never requeued
    assert not (run_dir / "retries.jsonl").exists() and not (run_dir / "restarts.jsonl").exists()
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "setup-errors").iterdir())]
    assert sorted(r["rank"] for r in records) == [0, 1, 2, 3]  # ranks of both nodes agreed
    assert {r["line"] for r in records} == {state["message"]}
    node0 = "\n".join(p.read_text() for p in (run_dir / "submitit").glob(f"{job}_0_log.*"))
    assert "RunFailed: configuration error, not retried: " + TRL_SAYS in node0

    table = cli("status", run_id).stdout
    assert "FAILED" in table
    assert f"{run_id}: failed: configuration error: {TRL_SAYS}" in table
    assert wait_no_processes(str(run_dir)) == {}
