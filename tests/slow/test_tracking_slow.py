"""Experiment tracking across requeues (#16), end to end on this machine: one run, report_to
wandb (offline: no server here) and tensorboard, stopped by a signal once and killed once
(the steps past its checkpoint trained again), has ONE tracker run whose steps are 1..N once
each: TensorBoard's event files read back by TensorBoard's own reader, W&B's offline files by
their record format.

Slow: three short attempts, ~60 s on 2 cores. `pytest -m slow tests/slow/test_tracking_slow.py`.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime.rank.checkpoints.folders import newest_complete
from tests.slow.runtime_slow_helpers import metrics, node_cmd, node_env, signal_tree, state, write_run

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")
pytestmark = pytest.mark.slow
STEPS = 7
TAG = "reward"  # TRL's mean reward, logged once per step


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model"), seed=0)


def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B transaction log (.wandb: a LevelDB-style log of protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, out, buf, pos, block = path.read_bytes(), [], b"", 7, 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def wandb_history(run_dir: Path) -> tuple[set[str], list[int]]:
    """Run ids and the train/global_step of every history row carrying the reward, in the
    order the offline segments (one per attempt) were written."""
    ids, steps = set(), []
    for segment in sorted((run_dir / "wandb").glob("offline-run-*")):
        for record in wandb_records(next(segment.glob("*.wandb"))):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                       for i in record.history.item}
                if f"train/{TAG}" in row:
                    steps.append(int(row["train/global_step"]))
    return ids, steps


def tensorboard_steps(run_dir: Path) -> tuple[list[int], int]:
    """Steps of train/reward as TensorBoard shows them, and how many event files wrote them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = run_dir / "tensorboard"
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    assert not [p for p in logdir.rglob("*") if p.is_dir()]  # one series: no second run dir
    return [e.step for e in acc.Scalars(f"train/{TAG}")], len(list(logdir.glob("events.*")))


def wait_for(run_dir: Path, proc: subprocess.Popen[str], ready: Any, limit: float = 90) -> None:
    deadline = time.time() + limit
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the attempt ended before it could be stopped"


def test_requeued_twice_is_one_tracker_run_with_each_step_once(tiny_model: Path,
                                                               tmp_path: Path) -> None:
    run_dir = tmp_path / "tracked"
    run = write_run(run_dir, tiny_model, steps=STEPS)
    run["grpo_config"].update(report_to=["wandb", "tensorboard"], save_steps=2)
    (run_dir / "run.json").write_text(json.dumps(run))
    env = node_env() | {"WANDB_BASE_URL": "http://127.0.0.1:9"}  # a closed port: offline or fail
    env.pop("WANDB_MODE", None)

    started = time.time() - 1
    # Attempt 1: a requeue signal after step 2 (graceful: all ranks save that step).
    first = subprocess.Popen(node_cmd(run_dir), env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    wait_for(run_dir, first, lambda: len(metrics(run_dir)) >= 2)
    signal_tree(first.pid, signal.SIGUSR2)
    out, _ = first.communicate(timeout=90)
    assert first.returncode == 0, out
    stopped = state(run_dir)["step"]
    assert state(run_dir)["phase"] == "interrupted" and stopped < STEPS - 2

    # Attempt 2: killed (a node failure) while it saves its next checkpoint, after logging that
    # step: the steps since the checkpoint of attempt 1 are trained, and logged, again.
    (run_dir / "fault-save-delay").write_text("60")  # holds that save open (callbacks.py)
    second = subprocess.Popen(node_cmd(run_dir), env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    wait_for(run_dir, second, lambda: (run_dir / "fault-saving").exists())
    time.sleep(1.0)  # the save's step is logged before the save starts
    signal_tree(second.pid, signal.SIGKILL)
    second.communicate(timeout=30)
    killed_at = max(r["step"] for r in metrics(run_dir))
    assert killed_at == int((run_dir / "fault-saving").read_text()) > stopped
    assert newest_complete(run_dir / "checkpoints").name == f"checkpoint-{stopped}"  # type: ignore[union-attr]

    # Attempt 3: to the end. It removes what the killed attempt 2 left in the node's temp dir
    # (this run directory is too deep for sockets inside it: runtime/node/scratch.py).
    scratch_base = Path(env.get("TMPDIR") or "/tmp")
    killed_scratch = [p for p in scratch_base.glob(f"hpc-grpo-{run_dir.name}-*")
                      if p.stat().st_mtime >= started]
    last = subprocess.run(node_cmd(run_dir), env=env, capture_output=True, text=True, timeout=120)
    assert last.returncode == 0, last.stdout + last.stderr
    assert killed_scratch and not [p for p in killed_scratch if p.exists()], killed_scratch
    st = state(run_dir)
    assert st["phase"] == "done" and st["step"] == STEPS
    assert st["tracker_logged_through"] >= killed_at

    tb_steps, files = tensorboard_steps(run_dir)
    assert files == 3  # one writer per attempt, all in the one directory
    assert tb_steps == list(range(1, STEPS + 1))

    ids, wb_steps = wandb_history(run_dir)
    assert ids == {run_dir.name}  # one W&B run id on every attempt
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 3
    assert Counter(wb_steps) == Counter(range(1, STEPS + 1)), wb_steps
    assert st["tracker_sync"] == (f"wandb sync --project hpc-grpo {run_dir}/wandb/offline-run-*")
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert f"wandb: run id {run_dir.name}, mode offline" in log
