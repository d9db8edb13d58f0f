"""Where a server-mode run's vLLM server is, as the node task that starts it
(runtime/node/vllm_server.py) and the trainers that connect to it (the rank's GRPOConfig) both
compute it: the host the node task names, ports next to the rendezvous port.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir.contract import VLLM_SERVER_PORT_OFFSET, WEIGHT_SYNC_PORT_OFFSET, RunRecord

HOST_ENV = "HPC_GRPO_VLLM_SERVER_HOST"


@dataclass(frozen=True)
class ServerAddress:
    host: str
    port: int
    group_port: int


def server_mode(run: RunRecord) -> bool:
    return run.device == "cuda" and run.vllm.server_mode


def address(env: Mapping[str, str]) -> ServerAddress:
    """Server port = rendezvous port + 1, weight-sync group port = + 2 (a job owns all three).

    The node task sets MASTER_PORT before starting the server and torchrun, so both sides agree.
    """
    if not env.get("MASTER_PORT", "").isdigit():
        raise ValueError("MASTER_PORT must be set: the vLLM server's ports follow it")
    master = int(env["MASTER_PORT"])
    return ServerAddress(env.get(HOST_ENV, "127.0.0.1"), master + VLLM_SERVER_PORT_OFFSET,
                         master + WEIGHT_SYNC_PORT_OFFSET)


# How long the server may take to answer: the node task's wait, and the trainers' (TRL's own
# default, 240 s, is shorter than a cold 7B server start on a node of its own, where the trainers
# start beside it rather than after it)
START_TIMEOUT_S = 600.0


def grpo_server_fields(env: Mapping[str, str], timeout_s: float | None = None) -> dict[str, Any]:
    """What the trainers' GRPOConfig needs to find this job's server, and how long to wait for
    it (``timeout_s``: the recipe's own, else the node task's)."""
    where = address(env)
    return {"vllm_server_host": where.host, "vllm_server_port": where.port,
            "vllm_group_port": where.group_port,
            "vllm_server_timeout": START_TIMEOUT_S if timeout_s is None else timeout_s}
