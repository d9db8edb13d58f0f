"""What doctor's jobs on the nodes share (the probe's and ``--bandwidth``'s link measurement): the
sites that have such jobs, what they ask srun for, a check's outcome as a row, and srun's last
words. Below ``doctor`` and ``bandwidth`` so that neither imports the other back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.scheduler.jobscript import allocation_options, gpu_request, pyxis_options

Status = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Row:
    check: str
    status: Status
    nodes: tuple[str, ...]
    detail: str


def last_lines(text: str, count: int) -> str:
    """srun's last words, minus its progress chatter, as one line."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not re.search(r"job \d+ (queued|has been allocated)", line)]
    return "; ".join(lines[-count:])[:400]


def srun_options(site: SiteProfile, nodes: int, partition: str, time_min: int, *,
                 tasks_per_node: int = 1, job_name: str = "hpc-grpo-doctor") -> list[str]:
    """The allocation: the job's partition, account, QOS and GPUs, but one CPU per task (one
    task per node, or a job's processes per node for the link measurement)."""
    options = [f"--nodes={nodes}", f"--ntasks-per-node={tasks_per_node}", "--cpus-per-task=1",
               f"--job-name={job_name}", f"--time={time_min}", "--kill-on-bad-exit=0"]
    options += allocation_options(site, partition)
    if site.gpus_per_node:
        options.append(gpu_request(site))
    return options + pyxis_options(site)


def runs_on(site: SiteProfile) -> bool:
    """Whether doctor can check this site: its job is Slurm's (srun), a local site has none."""
    return site.scheduler == "slurm"
