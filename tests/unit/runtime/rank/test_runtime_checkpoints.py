"""Resume selection: only complete checkpoints; metrics and stop-request bookkeeping."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.runtime.rank.checkpoints.folders import is_complete, newest_complete
from tests.unit.runtime.rank.runtime_checkpoints_helpers import make_checkpoint


def test_newest_complete_skips_half_written(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 2, state_step=2)
    four = make_checkpoint(tmp_path, 4, state_step=4)
    make_checkpoint(tmp_path, 6, marker=False, state_step=6)  # killed before the marker
    make_checkpoint(tmp_path, 8, marker=True)  # marker but no trainer_state.json
    make_checkpoint(tmp_path, 10, state_step=9)  # inconsistent state
    (tmp_path / "checkpoint-12-tmp").mkdir()
    (tmp_path / "README.md").write_text("x")
    assert newest_complete(tmp_path) == four
    assert not is_complete(tmp_path / "checkpoint-6")


def test_step_order_is_numeric(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 9, state_step=9)
    ten = make_checkpoint(tmp_path, 10, state_step=10)
    assert newest_complete(tmp_path) == ten


def test_nothing_to_resume(tmp_path: Path) -> None:
    assert newest_complete(tmp_path / "missing") is None
    make_checkpoint(tmp_path, 3, marker=False, state_step=3)
    assert newest_complete(tmp_path) is None


def test_truncate_metrics_keeps_each_step_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    for step in range(1, 8):
        rundir.append_jsonl(path, {"step": step})
    with open(path, "a") as fh:
        fh.write('{"step": 8, "rew')  # torn line of a killed writer
    assert rundir.truncate_metrics(path, 4) == 3
    assert [r["step"] for r in rundir.read_jsonl(path)] == [1, 2, 3, 4]


def test_stale_stop_request_is_consumed_fresh_one_kept(tmp_path: Path) -> None:
    req = rundir.request_stop(tmp_path, "test")
    old = time.time() - 100
    os.utime(req, (old, old))
    assert rundir.consume_stale_stop_request(tmp_path, started_at=time.time())
    assert not req.exists() and list((tmp_path / "logs").iterdir())
    rundir.request_stop(tmp_path, "fresh")
    assert not rundir.consume_stale_stop_request(tmp_path, started_at=time.time() - 10)
    assert req.exists()


def test_a_stop_request_for_this_attempt_is_kept_however_early_it_came(tmp_path: Path) -> None:
    """The node task's request from before the ranks started is this attempt's: kept; the same
    request met by the next attempt (a requeue: another restart count) is stale: moved."""
    req = rundir.request_stop(tmp_path, "USR2 to node task on n1", signal="USR2",
                              attempt="slurm-7.0")
    old = time.time() - 100
    os.utime(req, (old, old))
    assert not rundir.consume_stale_stop_request(tmp_path, time.time(), "slurm-7.0")
    assert req.exists()
    assert rundir.consume_stale_stop_request(tmp_path, time.time(), "slurm-7.1")
    assert not req.exists()
    req.write_text("stop please\n")  # a person's file, not a record: its age decides
    os.utime(req, (old, old))
    assert rundir.consume_stale_stop_request(tmp_path, time.time(), "slurm-7.1")


def test_update_state_merges_atomically(tmp_path: Path) -> None:
    rundir.update_state(tmp_path, phase="training", step=3)
    state = rundir.update_state(tmp_path, step=4)
    assert state["phase"] == "training" and state["step"] == 4
    assert json.loads((tmp_path / "state.json").read_text())["step"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
