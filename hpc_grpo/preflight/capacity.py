"""Doctor's disk and memory rows: the output file system's free space and the node's memory,
as the probe saw them on each node, against a planned checkpoint and the site profile.

Pure: a node's report and the expectation in, rows out (doctor.py aggregates them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hpc_grpo.planner.checkpoint_size import gib
from hpc_grpo.scheduler.jobscript import JobMemory

Status = Literal["pass", "warn", "fail", "skip"]
GIB = float(2**30)
PROFILE_SLACK = 0.95  # a node showing less than this share of the profile's memory is flagged


@dataclass(frozen=True)
class Capacity:
    """What a planned job needs (doctor --model); zeros: no job planned, facts only."""

    cpu_memory_gib: float = 0.0  # the profile's promise, which every host-memory plan uses
    checkpoint_bytes: int = 0
    checkpoints_at_once: int | None = None
    save_host_gib: float = 0.0  # held while training plus the save's own, on rank 0's node


def disk_row(report: Mapping[str, Any], want: Capacity) -> tuple[str, Status, str] | None:
    disk = report.get("disk")
    if not isinstance(disk, Mapping) or "free" not in disk:
        return None if disk is None else ("output disk", "fail", str(disk.get("detail", disk)))
    free, path = int(disk["free"]), disk.get("path", "?")
    have = f"{free / GIB:.1f} GiB free under {path}"
    one = want.checkpoint_bytes
    if not one:
        return ("output disk", "pass", f"{have} (doctor --model M compares a checkpoint)")
    if one > free:
        return ("output disk", "fail", f"{have}; one checkpoint needs {gib(one)}: no "
                                       "save can complete")
    at_once = want.checkpoints_at_once
    if at_once and one * at_once > free:
        return ("output disk", "warn", f"{have}; {at_once} checkpoints of {gib(one)} "
                                       "exist at once while saving: later saves will be skipped")
    return ("output disk", "pass", f"{have}; a checkpoint needs {gib(one)}")


def _limits(report: Mapping[str, Any], memory: Mapping[str, Any],
            job: JobMemory | None) -> list[tuple[int, str]]:
    """The node's memory and what bounds the job below it. Slurm's settings for the training
    job's own allocation where doctor could read them (``job``: the probe asks one CPU, not the
    job's, so its own cgroup and SLURM_MEM_* are not the job's); else the probe's."""
    limits = [(int(memory["total"]), "")]
    if job is not None:  # no limit: the node's memory, and why
        return [(job.mib * 2**20, f" ({job.why})"), *limits] if job.mib else [(limits[0][0], f" ({job.why})")]
    if memory.get("cgroup_limit"):
        limits.append((int(memory["cgroup_limit"]), " (cgroup limit)"))
    slurm = report.get("slurm_memory_gib")
    if isinstance(slurm, int | float) and slurm > 0:
        limits.append((int(slurm * GIB), " (Slurm's memory for the job)"))
    return limits


def memory_row(report: Mapping[str, Any], want: Capacity,
               job: JobMemory | None = None) -> tuple[str, Status, str] | None:
    memory = report.get("memory")
    if not isinstance(memory, Mapping) or "total" not in memory:
        return None if memory is None else ("node memory", "fail", str(memory.get("detail", memory)))
    total = int(memory["total"])
    # The least of the node's memory, the cgroup's limit and what Slurm gives the job, both
    # figures named (#27, #58: doctor said the node's 24 GiB where Slurm gave the job 3.9)
    usable, why = min(_limits(report, memory, job), key=lambda limit: limit[0])
    text = f"{usable / GIB:.1f} GiB for the job{why}" + (
        f" of the node's {total / GIB:.1f} GiB" if usable < total else "")
    if want.save_host_gib and want.save_host_gib > usable / GIB:
        return ("node memory", "fail", f"{text}; saving a checkpoint needs "
                                       f"{want.save_host_gib:.0f} GiB: the OOM killer would end it")
    if want.cpu_memory_gib and usable / GIB < PROFILE_SLACK * want.cpu_memory_gib:
        return ("node memory", "warn", f"{text}, the profile says {want.cpu_memory_gib:g}: "
                                       "host-memory plans use the profile's number")
    return ("node memory", "pass", text + (f"; the plan needs {want.save_host_gib:.1f} GiB"
                                           if want.save_host_gib else ""))


def capacity_rows(report: Mapping[str, Any], want: Capacity,
                  job: JobMemory | None = None) -> list[tuple[str, Status, str]]:
    return [row for row in (disk_row(report, want), memory_row(report, want, job)) if row is not None]
