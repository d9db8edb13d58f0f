"""Doctor's "plan hardware" row: what the probe saw on one node against the profile's GPUs per
node, GPU memory and CPU memory, through the same comparison the ranks make before the model
loads (rundir/hardware.py), so doctor fails a node exactly where a job would be refused.

Pure: a node's report and the profile's numbers in, one row out (doctor.py aggregates them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hpc_grpo.rundir.contract import HardwareBlock
from hpc_grpo.rundir.hardware import GIB, NodeFacts, compare
from hpc_grpo.scheduler.jobscript import JobMemory

Status = Literal["pass", "warn", "fail", "skip"]


def node_facts(report: Mapping[str, Any], job: JobMemory | None = None) -> NodeFacts:
    """The probe's findings (runtime/probe.py) as the comparison takes them; the job's memory
    from Slurm's settings for the training job's allocation where doctor read them (``job``:
    the probe's own allocation is one CPU's), else the probe's."""
    gpus = report.get("gpus")
    count = int(gpus["count"]) if isinstance(gpus, Mapping) and "count" in gpus else None
    gpu = report.get("gpu_memory")
    gpu_gib = gpu.get("gib") if isinstance(gpu, Mapping) else None
    memory = report.get("memory")
    total = limit = None
    source = ""
    if isinstance(memory, Mapping) and "total" in memory:
        total = int(memory["total"]) / GIB
        if memory.get("cgroup_limit"):
            limit, source = int(memory["cgroup_limit"]) / GIB, "cgroup memory.max"
    slurm = report.get("slurm_memory_gib")
    if job is not None:
        limit, source = (job.mib / 1024, job.why) if job.mib else (None, "")
    elif isinstance(slurm, int | float) and (limit is None or slurm < limit):
        limit, source = float(slurm), "Slurm's memory for the job"
    return NodeFacts(host=str(report.get("node", "")), gpus=count,
                     gpu_memory_gib=float(gpu_gib) if isinstance(gpu_gib, int | float) else None,
                     cpu_memory_gib=total, job_memory_gib=limit, job_memory_source=source)


def hardware_row(report: Mapping[str, Any], planned: HardwareBlock,
                 job: JobMemory | None = None) -> tuple[str, Status, str]:
    """fail: the node has less than the profile promises (a job would be refused there); warn:
    more (the plan leaves it unused); pass: as planned; skip: the profile promises nothing."""
    if not (planned.gpus_per_node or planned.gpu_memory_gib or planned.cpu_memory_gib):
        return ("plan hardware", "skip", "the profile sets no GPU or memory sizes to compare")
    verdict = compare(planned, node_facts(report, job))
    if verdict.shortfalls:
        keys = ", ".join(dict.fromkeys(s.key for s in verdict.shortfalls))
        return ("plan hardware", "fail", "; ".join(s.text() for s in verdict.shortfalls)
                + f": a job is refused here; set {keys} in the profile to what the node has")
    if verdict.notes:
        return ("plan hardware", "warn", "; ".join(verdict.notes))
    return ("plan hardware", "pass", "GPUs, GPU memory and CPU memory as the profile says "
                                     "(within 5%)")
