"""Periodic saves written in the background (#59, ``async_save``), interrupted while a write is
in flight, on the real sandbox cluster: ZeRO-3 (DeepSpeed's partition files), one rank on each
of two Slurm nodes.

Each file of a background write starts 1 s late (the test-only fault faults/slow_writes.py),
so with a save every 2 steps of at least 0.5 s a write is in flight nearly all the time. The run
is interrupted twice: USR2 to the batch shell (the stop's save gives the write in flight up and
writes its own step at once) and kill -9 of the second node's rank (the checkpoint being
written has no marker; the restart resumes from the one before). It must end with every step
logged once and, step for step, the rewards of an uninterrupted run that saved at once, and the
same fp32 master weights and Adam state to the bit. The dataset holds 16 prompts, 2 a step: an
epoch is 8 steps, so the run crosses an epoch boundary after its resumes.

Also ZeRO-3 on CPU through the same path as any run (it was test_cluster_train.py's own test):
the generated DeepSpeed config, checkpoints of DeepSpeed's files alone (no gathered model
file), and on each resume each node's rank reading its own shards ahead while the trainer is
built (runtime/rank/checkpoints/prefetch.py: a module-states and an optimizer file a rank).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.clusterlib import (
    RECIPE,
    counting_dataset,
    finished,
    job_nodes,
    kill_training,
    restarts,
    rewards,
    submit,
    wait_for,
    wait_no_processes,
    wait_restarts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
STEPS = 12
ARGS = ("--site", "sandbox", "--nodes", "2", "--procs-per-node", "1", "--zero-stage", "3",
        "--recipe", str(RECIPE), "--reward", "tests.slow.slow_reward:slow_length",
        "--set", f"max_steps={STEPS}", "--set", "save_steps=2", "--time", "00:30:00")
SLOW_WRITES = "HPC_GRPO_FAULT_BACKGROUND_WRITE_DELAY_S"  # faults/slow_writes.py
EPOCH_STEPS = 8  # 16 prompts, one a rank a step (4 generations of it)


def _attempt_log(run_dir: Path) -> str:
    """Rank 0's log of the current attempt (each attempt appends after a ``====`` header)."""
    path = run_dir / "logs" / "rank-0.log"
    text = path.read_text() if path.exists() else ""
    return text[text.rfind("==== "):]


def _in_flight(run_dir: Path, after: int, timeout: float = 240) -> int:
    """The step of this attempt's newest background save past ``after`` still being written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = _attempt_log(run_dir)
        going = [int(line.split("checkpoint-")[1].split(":")[0]) for line in log.splitlines()
                 if ": training goes on while " in line]
        newest = max((s for s in going if s > after), default=None)
        if newest is not None and f"checkpoint-{newest} complete" not in log:
            return newest
        time.sleep(0.1)
    raise AssertionError(f"no background write in flight past step {after}:\n{_attempt_log(run_dir)[-3000:]}")


def _tensors(value: Any, path: str = "") -> dict[str, Any]:
    """Every tensor in a loaded checkpoint file, by its path in the nesting."""
    import torch

    if isinstance(value, torch.Tensor):
        return {path: value}
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, (list, tuple)) else ()
    found: dict[str, Any] = {}
    for key, inner in items:
        found.update(_tensors(inner, f"{path}/{key}"))
    return found


def _partitions_differ(run_dir: Path, other: Path) -> list[str]:
    """Tensors of each rank's final ZeRO-3 optimizer file (fp32 master partition, Adam's m and
    v) that are not bit for bit the other run's."""
    import torch

    differ: list[str] = []
    ours, theirs = (d / "checkpoints" / f"checkpoint-{STEPS}" for d in (run_dir, other))
    files = sorted(p.relative_to(ours) for p in ours.glob("global_step*/*optim_states.pt"))
    assert len(files) == 2, files  # one partition a rank
    for name in files:
        a, b = (_tensors(torch.load(d / name, map_location="cpu", weights_only=False))
                for d in (ours, theirs))
        assert a.keys() == b.keys() and a, (name, sorted(a)[:5], sorted(b)[:5])
        differ += [f"{name}:{key}" for key in a if not torch.equal(a[key], b[key])]
    return differ


def test_a_background_write_interrupted_by_usr2_and_by_a_killed_node_resumes_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = (*ARGS, *counting_dataset(tmp_path, 2 * EPOCH_STEPS))
    ref_id, _, ref_dir = submit(tmp_path / "runs", *args, "--name", "sync-saves")
    assert wait_for(ref_id, finished, timeout=600)["state"] == "COMPLETED"
    ds = json.loads((ref_dir / "deepspeed.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False

    monkeypatch.setenv(SLOW_WRITES, "1")  # the job's environment: sbatch exports the caller's
    run_id, job, run_dir = submit(tmp_path / "runs", *args, "--set", "async_save=true",
                                  "--name", "async-saves")

    # 1. USR2 while checkpoint-N is written: the stop's save gives N up and writes its own.
    writing = _in_flight(run_dir, after=2)
    subprocess.run(["scancel", "--signal=USR2", "--batch", job], check=True)
    first = wait_restarts(run_dir, 1, timeout=240)
    assert first["cause"] == "user signal" and first["steps_lost"] == 0, first
    stopped = first["resumed_from_step"]
    log = (run_dir / "logs" / "rank-0.log").read_text()
    attempt = log[:log.index(f"checkpoint-{stopped} saved in")]
    assert "test fault: each background checkpoint file is written 1 s late" in attempt
    assert f"[stop] step {stopped}: stopping" in attempt and stopped > writing, (writing, stopped)
    assert attempt.rindex(f"checkpoint-{writing} given up") > attempt.rindex("[stop] step"), \
        attempt[-3000:]  # the write in flight at the signal, given up for the stop's save
    assert f"checkpoint-{writing} complete" not in attempt

    # 2. kill -9 of the second node's rank while checkpoint-M is written: M is never resumed.
    writing = _in_flight(run_dir, after=stopped)
    nodes = job_nodes(job)
    assert len(nodes) == 2, nodes
    assert kill_training(nodes[1:], run_dir) >= 1
    second = wait_restarts(run_dir, 2, timeout=240)
    assert second["cause"] == "task crash", second
    assert second["resumed_from_step"] < writing, (second, writing)

    row = wait_for(run_id, finished, timeout=600)
    assert row["state"] == "COMPLETED" and row["step"] == STEPS, row
    assert [r["cause"] for r in restarts(run_dir)] == ["user signal", "task crash"]
    assert second["resumed_from_step"] < EPOCH_STEPS < STEPS  # the resumed attempt crossed one
    got = rewards(run_dir)
    assert [s for s, _ in got] == list(range(1, STEPS + 1))  # each step once
    assert got == rewards(ref_dir)  # the uninterrupted run's, which saved at once
    assert _partitions_differ(run_dir, ref_dir) == []
    saved = sorted((run_dir / "checkpoints").glob("checkpoint-*"))
    assert saved and not any((c / "model.safetensors").exists() for c in saved)  # DeepSpeed's alone
    for rank in (0, 1):  # one rank a node, each on its own host, read ahead on both resumes
        log = (run_dir / "logs" / f"rank-{rank}.log").read_text()
        lines = [x for x in log.splitlines() if "checkpoint prefetch:" in x]
        assert len(lines) == 2 and all(" in 2 file(s) in " in x and "before train begin" in x
                                       for x in lines), lines
    assert wait_no_processes(str(run_dir)) == {}
