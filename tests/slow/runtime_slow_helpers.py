"""The slow tests' tiny run: writing it, running its node task, reading its metrics and state
(moved out of test_runtime_slow.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime.rank.setup.placement import expected_row
from tests.paths import REPO

STEPS = 8
CLI = str(Path(sys.executable).with_name("hpc-grpo"))  # this environment's console script


def cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``hpc-grpo ARGS`` from the checkout with ``env``, its output captured, no exit check."""
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=env)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model"), seed=0)


def write_run(run_dir: Path, model: Path, steps: int = STEPS, **over: Any) -> dict[str, Any]:
    """A run.json as the launcher would write it for 1 node x 2 processes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    nodes, ppn = 1, 2
    run = {
        "schema": 1,
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "payload": "train",
        "model": str(model),
        "dataset": {"name": "builtin:digits", "prompt_column": "prompt", "split": "train"},
        "reward_funcs": ["builtin:length"],
        "seed": 42,
        "nodes": nodes,
        "procs_per_node": ppn,
        "world_size": nodes * ppn,
        "device": "cpu",
        "dist_backend": "gloo",
        "grpo_config": {
            "max_steps": steps,
            "learning_rate": 0.01,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 32,
            "save_steps": 1000,
        },
        "vllm": {
            "enabled": False,
            "mode": "colocate",
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.3,
            "enable_sleep_mode": False,
            "max_model_length": None,
            "server": None,
        },  # fmt: skip
        "deepspeed": None,
        "stop": {"signals": ["USR2", "TERM"]},
        "ranks": [expected_row(r, ppn, 1) | {"dp_shard": r} for r in range(nodes * ppn)],
    }
    run.update(over)
    (run_dir / "run.json").write_text(json.dumps(run, indent=2))
    return run


def node_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return env | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def node_cmd(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "hpc_grpo.runtime.node.task", str(run_dir)]


def run_node(run_dir: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(node_cmd(run_dir), env=node_env(), capture_output=True, text=True, timeout=timeout)


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def state(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "state.json").read_text())


def signal_tree(pid: int, sig: int) -> list[int]:
    """Signal a process and all its descendants, like Slurm signalling a whole job step."""
    import psutil

    parent = psutil.Process(pid)
    procs = [parent, *parent.children(recursive=True)]
    for proc in procs:
        proc.send_signal(sig)
    return [p.pid for p in procs]
