"""The per-node task: start torchrun for this node and turn signals into a stop request.

Imported by the launcher's submitit pickle on every node, so it stays stdlib-only and cheap.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from hpc_grpo.runtime import rundir

PAYLOAD_MODULES = {"train": "hpc_grpo.runtime.train", "check": "hpc_grpo.runtime.check"}
# The agent ignores these: workers handle them; torchrun would die (USR2) or SIGKILL them 30 s
# after forwarding SIGTERM, which can cut a checkpoint in half.
AGENT_IGNORES = (signal.SIGUSR2, signal.SIGTERM)
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
CLEAN_END = ("done", "interrupted")


def free_port() -> int:
    """A TCP port free on this host right now (single-node runs without MASTER_PORT)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_argv(run: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The torchrun command for this node: static rendezvous, so global ranks follow node order."""
    payload = run.get("payload", "train")
    if payload not in PAYLOAD_MODULES:
        raise ValueError(f"unknown payload {payload!r}; expected one of {sorted(PAYLOAD_MODULES)}")
    nodes = int(run["nodes"])
    port = env.get("MASTER_PORT", "")
    if not port:
        if nodes > 1:
            raise ValueError("MASTER_PORT must be set when a run spans several nodes")
        port = str(free_port())
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(nodes),
        "--nproc-per-node", str(int(run["procs_per_node"])),
        "--node-rank", env.get("SLURM_NODEID") or "0",
        "--master-addr", env.get("MASTER_ADDR") or "127.0.0.1",
        "--master-port", port,
        "--max-restarts", "0",
        "-m", PAYLOAD_MODULES[payload],
        str(run["run_dir"]),
    ]  # fmt: skip


def attempt_id(env: Mapping[str, str]) -> str:
    """One id shared by all node tasks of one Slurm attempt (job id + restart count)."""
    job = env.get("SLURM_JOB_ID")
    if job:
        return f"slurm-{job}.{env.get('SLURM_RESTART_COUNT', '0')}"
    return f"local-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def child_env(env: Mapping[str, str], attempt: str) -> dict[str, str]:
    """torchrun's environment: one thread per rank by default, this package importable."""
    out = dict(env)
    out.setdefault("OMP_NUM_THREADS", "1")
    out.setdefault("PYTHONUNBUFFERED", "1")
    out.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGINT,SIGHUP,SIGQUIT")
    out["HPC_GRPO_ATTEMPT"] = attempt
    root = str(Path(__file__).resolve().parents[2])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return out


def _ignore_agent_signals() -> None:
    for sig in AGENT_IGNORES:
        signal.signal(sig, signal.SIG_IGN)  # inherited by the workers until they set handlers


def exit_code(torchrun_rc: int, state: Mapping[str, Any], attempt: str) -> int:
    """0 when this attempt's rank 0 recorded a clean end; torchrun's own code otherwise."""
    if state.get("attempt") == attempt and state.get("phase") in CLEAN_END:
        return 0
    return torchrun_rc


class NodeTask:
    """Run this node's share of a run; picklable (holds only the run directory)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = str(run_dir)

    def __repr__(self) -> str:
        return f"NodeTask({self.run_dir!r})"

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        rundir.request_stop(self.run_dir, f"{name} to node task on {socket.gethostname()}")
        print(f"[node] {name}: stop requested; waiting for torchrun", flush=True)

    def __call__(self) -> int:
        run = {**rundir.load_run(self.run_dir), "run_dir": self.run_dir}
        attempt = attempt_id(os.environ)
        argv = torchrun_argv(run, os.environ)
        (Path(self.run_dir) / "logs").mkdir(parents=True, exist_ok=True)
        print(f"[node] {socket.gethostname()} attempt {attempt}: {' '.join(argv)}", flush=True)
        on_main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if on_main else {}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            proc = subprocess.Popen(
                argv, env=child_env(os.environ, attempt), preexec_fn=_ignore_agent_signals
            )
            started = time.time()
            rc = proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        code = exit_code(rc, rundir.read_state(self.run_dir), attempt)
        print(f"[node] torchrun exited {rc} after {time.time() - started:.1f} s; "
              f"node task returns {code}", flush=True)  # fmt: skip
        return code


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.node RUN_DIR`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hpc_grpo.runtime.node RUN_DIR", file=sys.stderr)
        return 2
    return NodeTask(args[0])()


if __name__ == "__main__":
    sys.exit(main())
