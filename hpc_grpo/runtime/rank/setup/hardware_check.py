"""Every rank, before the model loads: the node's GPUs, GPU memory and CPU memory against the
plan's (run.json's ``hardware``, the site profile's numbers; the comparison is
rundir/hardware.py's).

Each rank probes what it can see (its own GPU's total memory, the visible GPU count, the
host's MemTotal and the job's memory limit from Slurm or the cgroup), the ranks gather their
shortfalls, and every rank raises the same one-line ``HardwareShortfall``, a ValueError: the
ranks agree on it, so shared/setup_failure.py records a configuration error and the node task does
not retry it (the next allocation of the same partition has the same cards). A node with more
than planned is a note in the rank log.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hardware import (
    GIB,
    NodeFacts,
    Shortfall,
    compare,
    gpus_needed,
    shortfall_line,
    slurm_memory_gib,
    usable_memory,
)
from hpc_grpo.runtime.shared.host_memory import memory

__all__ = ["HardwareShortfall", "check", "host_memory", "probe", "slurm_memory_gib"]


class HardwareShortfall(ValueError):
    """The nodes have less than the plan assumed (a configuration error: not retried)."""


def host_memory(env: Mapping[str, str]) -> tuple[float | None, float | None, str]:
    """MemTotal (GiB), the tightest job limit (GiB) and its source: Slurm's number or the
    cgroup's memory.max, whichever is smaller."""
    try:
        seen = memory()
    except (OSError, ValueError, KeyError, IndexError):
        return None, None, ""
    total = int(seen["total"]) / GIB
    limits = []
    if seen.get("cgroup_limit"):
        limits.append((int(seen["cgroup_limit"]) / GIB, "cgroup memory.max"))
    slurm = slurm_memory_gib(env)
    if slurm is not None:
        limits.append((slurm, "Slurm's memory for the job"))
    if not limits:
        return total, None, ""
    limit, source = min(limits)
    return total, limit, source


def usable_host_gib(env: Mapping[str, str]) -> float | None:
    """The host memory a job may use here (rundir/hardware.usable_memory's rule over
    host_memory's figures): what a profile written from this machine should say."""
    total, limit, source = host_memory(env)
    return usable_memory(NodeFacts(cpu_memory_gib=total, job_memory_gib=limit,
                                   job_memory_source=source))[0]


def probe(run: RunRecord, device: Any, env: Mapping[str, str]) -> NodeFacts:
    """This rank's view of its node."""
    total, limit, source = host_memory(env)
    gpus = gpu_gib = None
    if run.device == "cuda":
        import torch  # here: the module imports without torch

        gpus = int(torch.cuda.device_count())
        gpu_gib = int(torch.cuda.mem_get_info(device)[1]) / GIB
    return NodeFacts(host=socket.gethostname().split(".")[0], gpus=gpus, gpu_memory_gib=gpu_gib,
                     cpu_memory_gib=total, job_memory_gib=limit, job_memory_source=source)


def check(run: RunRecord, device: Any, env: Mapping[str, str] | None = None) -> list[str]:
    """Compare on every rank and gather; raises HardwareShortfall (the same line on every rank)
    when any node has less than planned, else returns this rank's notes. Every rank reaches the
    all_gather, so none hangs; a run.json without a hardware block checks nothing."""
    import torch.distributed as dist  # here: the module imports without torch

    planned = run.hardware
    if not (planned.gpus_per_node or planned.gpu_memory_gib or planned.cpu_memory_gib):
        return []
    facts = probe(run, device, os.environ if env is None else env)
    verdict = compare(planned, facts, gpus_needed(run) if run.device == "cuda" else 0)
    mine = [dataclasses.asdict(s) for s in verdict.shortfalls]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (facts.host, mine))
    pairs = [(str(host), Shortfall(**item)) for host, items in gathered for item in items]
    if pairs:
        raise HardwareShortfall(shortfall_line(pairs))
    return [f"this node: {note}" for note in verdict.notes]
