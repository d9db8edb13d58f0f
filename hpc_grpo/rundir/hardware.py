"""Does a node have the hardware the plan was sized for? Pure: facts in, a verdict out.

The plan (TP size, ZeRO stage, offload, vLLM's memory share, how many checkpoints fit in host
memory) is computed from the site profile's GPUs per node, GPU memory and CPU memory, never
from the nodes. A profile that promises more than the nodes have (139 GiB GPUs on 80 GB
cards) would otherwise run out of memory hours later, or just run slower than planned with
nothing saying why. Every rank compares before the model loads (runtime/rank/setup/hardware_check.py)
and ``hpc-grpo doctor`` compares what its probe saw (preflight/doctor.py), both through
``compare`` here, so the two say the same thing.

Less than planned, beyond ``TOLERANCE``, is a shortfall: a configuration error (the same
numbers on the next try), one line with both numbers. More than planned is a note: the plan
leaves memory unused. The tolerance is there because vendors sell GB and the profile counts
GiB: an "80 GB" H100 reports 79.2 GiB to CUDA and a 256 GiB node shows about 251 GiB in
/proc/meminfo (the kernel keeps the rest). A profile that says 80 means 80 GB-class cards, so
anything within 5% below the promise passes. Stdlib only, in the run directory's room: the ranks
and the launcher (doctor) import it, and run.json's ``hardware`` block is defined here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # contract.py imports HardwareBlock from here
    from hpc_grpo.rundir.contract import RunRecord


@dataclass(frozen=True)
class HardwareBlock:
    """The site profile's hardware, which the plan was sized for: every rank compares it with
    its node before the model loads (rundir/hardware.py). 0 means the profile does not say
    (and an old run.json without the block reads as all zeros: nothing is checked)."""

    gpus_per_node: int = 0
    gpu_memory_gib: float = 0.0
    cpu_memory_gib: float = 0.0
    gpu_type: str = ""


TOLERANCE = 0.05  # the share below the profile's number that still counts as "as planned"
GIB = float(2**30)


@dataclass(frozen=True)
class NodeFacts:
    """What one node (or one rank on it) has; None: not probed there."""

    host: str = ""
    gpus: int | None = None  # GPUs this task may use (CUDA_VISIBLE_DEVICES as Slurm set it)
    gpu_memory_gib: float | None = None  # total memory of the smallest of them
    cpu_memory_gib: float | None = None  # the host's MemTotal
    job_memory_gib: float | None = None  # a tighter limit for this job: Slurm's or the cgroup's
    job_memory_source: str = ""  # which one: "SLURM_MEM_PER_NODE", "cgroup memory.max", ...


@dataclass(frozen=True)
class Shortfall:
    """One quantity below the plan: what, how much the node has and what the plan assumed."""

    what: str  # "GPUs per node", "GPU memory", "CPU memory"
    found: float
    planned: float
    key: str  # the profile key to fix
    unit: str = " GiB"
    source: str = ""  # where the found number came from, when it is not the obvious one

    def text(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return f"{self.what} {_num(self.found)}{self.unit}{where} < planned {_num(self.planned)}" \
               f"{self.unit} ({self.key})"


@dataclass(frozen=True)
class HardwareVerdict:
    shortfalls: tuple[Shortfall, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.shortfalls


def _num(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def below(found: float, planned: float, tolerance: float = TOLERANCE) -> bool:
    """Less than planned by more than the tolerance."""
    return found < planned * (1.0 - tolerance)


def usable_memory(facts: NodeFacts) -> tuple[float | None, str]:
    """The memory this job may use on the node: the smaller of MemTotal and Slurm's/the
    cgroup's limit, and where that number came from ("" for MemTotal)."""
    total, limit = facts.cpu_memory_gib, facts.job_memory_gib
    if limit is not None and (total is None or limit < total):
        return limit, facts.job_memory_source or "job limit"
    return total, ""


def compare(planned: HardwareBlock, facts: NodeFacts, gpus_needed: int | None = None,
            tolerance: float = TOLERANCE) -> HardwareVerdict:
    """The node against the plan's assumptions. ``gpus_needed``: GPUs this task must see (the
    profile's gpus_per_node unless the caller knows better, e.g. server mode's trainers)."""
    short: list[Shortfall] = []
    notes: list[str] = []
    want_gpus = planned.gpus_per_node if gpus_needed is None else gpus_needed
    if want_gpus and facts.gpus is not None:
        if facts.gpus < want_gpus:
            short.append(Shortfall("GPUs per node", facts.gpus, want_gpus, "gpus_per_node", ""))
        elif facts.gpus > want_gpus:
            notes.append(f"{facts.gpus} GPUs visible, the plan uses {want_gpus}")
    if planned.gpu_memory_gib and facts.gpu_memory_gib is not None:
        have, want = facts.gpu_memory_gib, planned.gpu_memory_gib
        if below(have, want, tolerance):
            short.append(Shortfall("GPU memory", round(have, 1), want, "gpu_memory_gib"))
        elif have > want * (1.0 + tolerance):
            notes.append(f"GPU memory {have:.1f} GiB, the plan assumed {_num(want)} GiB "
                         "(gpu_memory_gib): memory left unused")
    usable, source = usable_memory(facts)
    if planned.cpu_memory_gib and usable is not None:
        want = planned.cpu_memory_gib
        if below(usable, want, tolerance):
            short.append(Shortfall("CPU memory", round(usable, 1), want, "cpu_memory_gib",
                                   source=source))
        elif usable > want * (1.0 + tolerance):
            notes.append(f"CPU memory {usable:.0f} GiB{f' ({source})' if source else ''}, the "
                         f"plan assumed {_num(want)} GiB (cpu_memory_gib)")
    return HardwareVerdict(tuple(short), tuple(notes))


def gpus_needed(run: RunRecord) -> int:
    """GPUs each node's ranks must see: the profile's count, or in server mode the trainers'
    (the node task hides the server's GPUs from them: runtime/node/task.py)."""
    server = run.vllm.server if run.vllm.server_mode else None
    return len(server.trainer_gpus) if server is not None else run.hardware.gpus_per_node


def shortfall_line(found: Sequence[tuple[str, Shortfall]], hint: bool = True) -> str:
    """One line for every node's shortfalls (``(host, shortfall)`` pairs from all ranks): per
    quantity the least any node has, the hosts, and the profile key. The same gathered pairs give
    the same line on every rank, which is what makes it a configuration error
    (runtime/shared/setup_failure.py compares the ranks' lines)."""
    by_what: dict[str, list[tuple[str, Shortfall]]] = {}
    for host, item in found:
        by_what.setdefault(item.what, []).append((host, item))
    parts = []
    for pairs in by_what.values():
        least = min(pairs, key=lambda p: p[1].found)[1]
        hosts = sorted({h for h, _ in pairs})
        shown = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
        parts.append(f"{least.text()} on {shown}")
    keys = ", ".join(dict.fromkeys(p[0][1].key for p in by_what.values()))
    fix = (f": set {keys} in the site profile to what the nodes have and submit again"
           if hint else "")
    return "the nodes have less than the plan assumed: " + "; ".join(parts) + fix


def slurm_memory_gib(env: Mapping[str, str]) -> float | None:
    """The memory Slurm gave this job on the node (SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU x
    SLURM_CPUS_ON_NODE, both in MiB); None where the job did not ask for memory."""
    per_node = env.get("SLURM_MEM_PER_NODE", "")
    if per_node.isdigit() and int(per_node) > 0:
        return int(per_node) / 1024
    per_cpu, cpus = env.get("SLURM_MEM_PER_CPU", ""), env.get("SLURM_CPUS_ON_NODE", "")
    if per_cpu.isdigit() and cpus.isdigit() and int(per_cpu) > 0:
        return int(per_cpu) * int(cpus) / 1024
    return None
