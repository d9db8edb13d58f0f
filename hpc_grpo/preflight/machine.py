"""This machine, as a local site runs on it: its GPUs (nvidia-smi), usable CPUs and host memory.

A GPU workstation is a site of its own (#58): `site init NAME --local` writes a profile from
these figures and the shipped ``local`` profile (``gpus_per_node: auto``) is resolved from them
before planning (preflight/local_site.py). The parser is pure; ``probe`` is the one thin runner,
bounded by a timeout: a wedged driver makes nvidia-smi hang, and a plan must never hang on it.
An absent nvidia-smi, its failure or its silence all mean no GPUs, each saying so.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass

from hpc_grpo.preflight.siteinit import GPU_GIB
from hpc_grpo.runtime.shared.host_memory import memory, usable_cpus

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=name,memory.total,memory.used",
              "--format=csv,noheader,nounits")
PROBE_TIMEOUT_S = 10.0
_MIB = 2**20


@dataclass(frozen=True)
class Gpu:
    name: str  # as nvidia-smi names it: "NVIDIA H200"
    memory_mib: int  # memory.total: what the card has, a little more than CUDA hands out
    used_mib: int | None = None  # memory.used when asked: another process's (another run's)
    index: int = 0  # nvidia-smi's (and CUDA_VISIBLE_DEVICES') number of the card


@dataclass(frozen=True)
class Machine:
    """What a local run here has. ``gpu_source`` says where the GPU figures came from (or why
    there are none); ``memory_source`` likewise for the host memory."""

    gpus: tuple[Gpu, ...]
    cpus: int
    memory_mib: int
    gpu_source: str = "from nvidia-smi"
    memory_source: str = "MemTotal of /proc/meminfo"

    @property
    def gpu_memory_gib(self) -> float:
        """The smallest card's memory in GiB (one decimal): a plan that fits it fits all."""
        return round(min(g.memory_mib for g in self.gpus) / 1024, 1) if self.gpus else 0.0

    @property
    def gpu_type(self) -> str:
        """The most numerous card's type, as siteinit.GPU_GIB names it where it knows it."""
        if not self.gpus:
            return ""
        return gpu_type(Counter(g.name for g in self.gpus).most_common(1)[0][0])

    @property
    def memory_gib(self) -> float:
        return round(self.memory_mib / 1024, 1)

    @property
    def gpus_unknown(self) -> bool:
        """nvidia-smi is here but failed, hung or could not run (a driver/library mismatch
        after an upgrade without a reboot, a card fallen off the bus): the GPUs are unknown, not
        absent, and a CPU plan would be a guess."""
        return self.gpu_source.startswith(PROBE_FAILED)

    def gpus_line(self) -> str:
        """``1 x NVIDIA H200 143,771 MiB, from nvidia-smi``, or ``no GPU (nvidia-smi not found)``."""
        if not self.gpus:
            return f"no GPU ({self.gpu_source})"
        kinds = Counter((g.name, g.memory_mib) for g in self.gpus)
        shown = ", ".join(f"{n} x {name} {mib:,} MiB" for (name, mib), n in kinds.items())
        return f"{shown}, {self.gpu_source}"


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader,nounits``:
    one ``NAME, TOTAL, USED`` line per GPU (``NAME, TOTAL`` read too: the query before
    memory.used). The name may hold commas of its own, so the figures are the last fields; a
    line without a whole number for the total (``[N/A]``, a driver message) is no GPU."""
    whole = re.compile(r"\s*\d+\s*")
    gpus: list[Gpu] = []
    for line in text.splitlines():
        head, sep, last = line.rpartition(",")
        if not (sep and head.strip() and whole.fullmatch(last)):
            continue
        name, sep2, total = head.rpartition(",")
        if sep2 and name.strip() and whole.fullmatch(total):
            gpus.append(Gpu(name.strip(), int(total), int(last), len(gpus)))
        else:
            gpus.append(Gpu(head.strip(), int(last), None, len(gpus)))
    return tuple(gpus)


def visible(gpus: tuple[Gpu, ...], cuda_visible: str | None) -> tuple[Gpu, ...]:
    """The GPUs a run here may use: nvidia-smi lists every card, CUDA_VISIBLE_DEVICES hides some
    from the ranks, which would then find fewer than planned. Read as CUDA reads it: entries
    left to right up to the first it cannot use (``-1``, an index past the last card, one seen
    before), so ``-1`` and ``5,0`` on one card show none and ``0,-1,1`` shows card 0. UUIDs
    (``GPU-...``) are counted, not matched (the query has no UUIDs): that many cards from the
    first, the same cards on a machine of one kind. Unset: all of them."""
    if cuda_visible is None:
        return gpus
    chosen: list[Gpu] = []
    seen: set[str] = set()
    for entry in (v.strip() for v in cuda_visible.split(",")):
        if entry.startswith("GPU-") and entry not in seen and len(chosen) < len(gpus):
            chosen.append(gpus[len(chosen)])
        elif entry.isdigit() and int(entry) < len(gpus) and entry not in seen:
            chosen.append(gpus[int(entry)])
        else:
            break
        seen.add(entry)
    return tuple(chosen)


def gpu_type(name: str) -> str:
    """A profile's gpu_type for nvidia-smi's name: the type siteinit.GPU_GIB knows
    (``NVIDIA H100 80GB HBM3`` -> ``h100``), else the name in lower case without the vendor."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    for known in sorted(GPU_GIB, key=len, reverse=True):
        if known in words:
            return known
    return "_".join(w for w in words if w not in ("nvidia", "tesla"))


# How _gpus says nvidia-smi is present but told nothing (Machine.gpus_unknown).
MIG_SLICES = "CUDA_VISIBLE_DEVICES names MIG slices"
PROBE_FAILED = ("nvidia-smi failed", "nvidia-smi gave no answer", "nvidia-smi cannot run",
                MIG_SLICES)


def _gpus() -> tuple[tuple[Gpu, ...], str]:
    try:
        done = subprocess.run(list(NVIDIA_SMI), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return (), "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return (), f"nvidia-smi gave no answer within {PROBE_TIMEOUT_S:g} s"
    except OSError as err:
        return (), f"nvidia-smi cannot run: {err.strerror or err}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return (), f"nvidia-smi failed: {said[0][:120] if said else f'exit {done.returncode}'}"
    every = parse_nvidia_smi(done.stdout)
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden and "MIG-" in hidden:  # nvidia-smi's memory.total is the whole card's, not a slice's
        return (), (f"{MIG_SLICES} (CUDA_VISIBLE_DEVICES={hidden}): nvidia-smi's memory is the "
                    "whole card's; write gpu_memory_gib of a slice in a profile")
    gpus = visible(every, hidden)
    if not every:
        return (), "nvidia-smi lists none"
    return gpus, ("from nvidia-smi" if len(gpus) == len(every) else
                  f"from nvidia-smi, of {len(every)}: CUDA_VISIBLE_DEVICES={hidden}")


def probe() -> Machine:
    """Ask this machine. Host memory is the ranks' own rule (runtime/shared/host_memory.py):
    MemTotal, or the cgroup's smaller limit, so a profile written from it never promises more
    than the ranks' hardware check then finds."""
    gpus, gpu_source = _gpus()
    try:
        seen = memory()
        limit = seen["cgroup_limit"]
        total = int(limit or seen["total"])
        where = "the cgroup's memory.max" if limit else "MemTotal of /proc/meminfo"
    except (OSError, ValueError, KeyError, IndexError):
        total, where = 0, "/proc/meminfo unreadable"
    return Machine(gpus, usable_cpus(), total // _MIB, gpu_source, where)
