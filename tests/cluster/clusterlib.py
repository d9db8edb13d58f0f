"""Helpers for tests on the real sandbox cluster: run the real CLI, wait, look inside nodes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.paths import RECIPES

# The console script of this environment; where the package is only importable (the GPU
# machine runs the checkout from PYTHONPATH), the module itself.
_SCRIPT = Path(sys.executable).with_name("hpc-grpo")
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "hpc_grpo.cli"]
RECIPE = RECIPES / "tiny-cpu.yaml"
NODES = ("node1", "node2", "node3", "node4")
SLOWEST_POLL_S = 4.0  # wait_for's longest pause between two status polls


def cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))
    if check and proc.returncode != 0:
        raise AssertionError(f"hpc-grpo {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc


def submitted(out: str) -> tuple[str, str, Path]:
    """(run id, job id, run directory) from submit's first line; the output root also holds
    other entries (the shared compile cache), so a test must not pick its first folder."""
    match = re.search(r"run (\S+)\s+job (\S+)\s+dir (\S+)", out)
    assert match, out
    return match.group(1), match.group(2), Path(match.group(3))


def submit(root: Path, *args: str) -> tuple[str, str, Path]:
    """Submit without waiting. Its timeout guards against a hang only: submit's login-node checks
    import the training stack, and beside four other test processes on CI's 2 cores one took
    more than 120 s (2026-11-27)."""
    return submitted(cli("submit", "--output-root", str(root), "--no-wait", *args,
                         timeout=300).stdout)


def status(run_id: str) -> dict[str, Any]:
    rows = json.loads(cli("status", "--json", run_id).stdout)
    assert len(rows) == 1
    return dict(rows[0])


def wait_for(run_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 240,
             seen: list[str] | None = None, every: float | None = None) -> dict[str, Any]:
    """Poll ``hpc-grpo status --json`` until ``done(row)``. Each poll is a CLI process (about
    0.3 s of CPU alone, more on CI's 2 busy cores) and a waiting test polls for minutes, so the
    pause grows from 1 s to ``SLOWEST_POLL_S`` unless ``every`` fixes it: 1 s where the test
    must act on a moment mid-run (a step reached, a stall) before it passes."""
    deadline = time.monotonic() + timeout
    pause = every or 1.0
    row = status(run_id)
    while time.monotonic() < deadline:
        row = status(run_id)
        if seen is not None and (not seen or seen[-1] != row["state"]):
            seen.append(row["state"])
        if done(row):
            return row
        time.sleep(pause)
        pause = every or min(pause * 1.25, SLOWEST_POLL_S)
    raise AssertionError(f"timed out waiting on {run_id}: last status {row}")


def finished(row: dict[str, Any]) -> bool:
    return bool(row["finished"])


def node_processes(pattern: str) -> dict[str, list[str]]:
    """Command lines matching ``pattern`` in each node namespace (slurmd itself excluded)."""
    found: dict[str, list[str]] = {}
    for node in NODES:
        pids = subprocess.run(["ip", "netns", "pids", f"hpcgrpo-{node}"], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if pattern in cmd and "slurmd" not in cmd:
                found.setdefault(node, []).append(cmd)
    return found


def wait_no_processes(pattern: str, timeout: float = 30) -> dict[str, list[str]]:
    deadline = time.monotonic() + timeout
    left = node_processes(pattern)
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = node_processes(pattern)
    return left


def wait_step(run_id: str, step: int, timeout: float = 240) -> dict[str, Any]:
    """Until the run is RUNNING at ``step`` or later (training, not a resumed attempt's start)."""
    return wait_for(run_id, lambda r: r["state"] == "RUNNING" and r["phase"] == "training"
                    and r["step"] >= step, timeout=timeout, every=1.0)


def job_nodes(job: str) -> tuple[str, ...]:
    """The nodes a job holds now, in order: a requeued job may start on other nodes than before
    (the sandbox is shared, and a node another job holds is not free for the requeued one)."""
    nodelist = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True,
                              text=True).stdout.strip()
    if not nodelist:
        return ()
    return tuple(subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                text=True).stdout.split())


def node_down(node: str) -> None:
    """Kill ``node`` for good: its slurmd and every process in its namespace (sandbox.sh)."""
    subprocess.run(["bash", str(Path(__file__).with_name("sandbox.sh")), "node-down", node],
                   check=True, capture_output=True, text=True, timeout=120)


def node_up(node: str) -> None:
    """Bring ``node`` back after ``node_down``: slurmd again, resumed, idle (sandbox.sh)."""
    subprocess.run(["bash", str(Path(__file__).with_name("sandbox.sh")), "node-up", node],
                   check=True, capture_output=True, text=True, timeout=180)


def kill_training(nodes: tuple[str, ...], run_dir: Path) -> int:
    """kill -9 every rank process of this run on the given nodes; returns how many."""
    killed = 0
    for node in nodes:
        for pid in subprocess.run(["ip", "netns", "pids", f"hpcgrpo-{node}"], capture_output=True,
                                  text=True).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "hpc_grpo.runtime.rank.train" in cmd and str(run_dir) in cmd:
                subprocess.run(["kill", "-9", pid], check=False)
                killed += 1
    return killed


def rewards(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(int(r["step"]), float(r["reward_mean"])) for r in rows]


def final_state_differs(run_dir: Path, other: Path, step: int) -> list[str]:
    """Tensors of the final checkpoints' weights and Adam state that are not bit for bit equal.

    Rewards alone hide a few-ulp weight difference for 20-30 steps (issue #13: DDP's bucket
    layout in a resumed process's first step, seen only from 3 ranks up)."""
    import torch
    from safetensors.torch import load_file

    ours, theirs = (d / "checkpoints" / f"checkpoint-{step}" for d in (run_dir, other))
    a, b = load_file(ours / "model.safetensors"), load_file(theirs / "model.safetensors")
    differ = [name for name in a if not torch.equal(a[name], b[name])]
    sa, sb = (torch.load(d / "optimizer.pt", weights_only=False)["state"] for d in (ours, theirs))
    differ += [f"adam {key}.{n}" for key in sa for n in sa[key]
               if not torch.equal(sa[key][n], sb[key][n])]
    return differ


def restarts(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "restarts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_restarts(run_dir: Path, count: int, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = restarts(run_dir)
        if len(found) >= count:
            return found[count - 1]
        time.sleep(1.0)
    raise AssertionError(f"no restart {count} in {run_dir}: {restarts(run_dir)}")


def counting_dataset(folder: Path, count: int) -> tuple[str, str]:
    """``--dataset FILE`` of ``count`` counting prompts of 1 to 4 numbers, in ``folder`` (the
    nodes share /tmp)."""
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": "Count on: " + " ".join(map(str, range(i, i + 1 + i % 4)))})
                            + "\n" for i in range(count)))
    return ("--dataset", str(path))
