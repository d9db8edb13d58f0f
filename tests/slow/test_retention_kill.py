"""A run keeping one checkpoint (save_total_limit 1), killed while its next save is written,
still has its previous complete checkpoint to resume from (#29). transformers deletes old
checkpoints inside the save, before the completion marker; with GRPOConfig's rotation the kill
left no complete checkpoint at all. ~20 s on 2 cores."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hpc_grpo.runtime.rank.checkpoints.folders import newest_complete
from tests.slow.runtime_slow_helpers import metrics, node_cmd, node_env, signal_tree, state, write_run

pytestmark = pytest.mark.slow
STEPS = 7


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool], limit: float = 90) -> None:
    deadline = time.time() + limit
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the attempt ended before the kill"


def test_a_kill_mid_save_keeping_one_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "model", seed=0)
    run_dir = tmp_path / "run"
    run = write_run(run_dir, model, steps=STEPS)
    run["grpo_config"].update(save_steps=2, save_total_limit=1)
    (run_dir / "run.json").write_text(json.dumps(run))
    env = node_env()
    first = subprocess.Popen(node_cmd(run_dir), env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    wait_for(first, lambda: (newest_complete(run_dir / "checkpoints") or Path("x-0")).name
             == "checkpoint-2")
    (run_dir / "fault-save-delay").write_text("60")  # holds the save at step 4 open (callbacks.py)
    wait_for(first, lambda: (run_dir / "fault-saving").exists())
    time.sleep(1.0)
    signal_tree(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    assert int((run_dir / "fault-saving").read_text()) == 4
    assert (run_dir / "checkpoints" / "checkpoint-4").is_dir()  # its files written, no marker
    assert newest_complete(run_dir / "checkpoints") == run_dir / "checkpoints" / "checkpoint-2"

    last = subprocess.run(node_cmd(run_dir), env=env, capture_output=True, text=True, timeout=120)
    assert last.returncode == 0, last.stdout + last.stderr
    st = state(run_dir)
    assert st["phase"] == "done" and st["step"] == STEPS
    assert st["resumed_from"] == str(run_dir / "checkpoints" / "checkpoint-2")
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*")) == \
        [f"checkpoint-{STEPS}"]
    assert max(r["step"] for r in metrics(run_dir)) == STEPS
