"""The job's ports on a node: MASTER_PORT fixed once for torchrun, the ranks and the vLLM server
(rendezvous, +1, +2), and a free run of them picked here when one node runs without Slurm."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from hpc_grpo.rundir.contract import PORTS_PER_JOB


def free_port(span: int = PORTS_PER_JOB) -> int:
    """A TCP port free on this host right now with the next ``span - 1`` free too (a job's
    rendezvous, vLLM server and weight-sync ports), for single-node runs without MASTER_PORT."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + span - 1 < 65536 and all(_free(port + i) for i in range(span)):
            return port
    raise RuntimeError(f"found no {span} consecutive free TCP ports")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def with_master_port(env: Mapping[str, str], nodes: int, pick: Callable[[], int]) -> dict[str, str]:
    """The environment with MASTER_PORT fixed once: torchrun, the ranks and the vLLM server
    (rendezvous port + 1, + 2) must all see the same one. Only one node may pick its own."""
    out = dict(env)
    if not out.get("MASTER_PORT"):
        if nodes > 1:
            raise ValueError("MASTER_PORT must be set when a run spans several nodes")
        out["MASTER_PORT"] = str(pick())
    return out
