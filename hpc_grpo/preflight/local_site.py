"""A site's GPUs against the hardware it runs on, before planning (#58).

A local site plans for this machine: ``gpus_per_node: auto`` (the shipped ``local`` profile) is
resolved from the probe (preflight/machine.py) into a concrete frozen profile, and a local
profile that says 0 GPUs on a machine that has some gets a warning line saying how to use them.
A Slurm profile declaring fewer GPUs per node than its partition's nodes have (sinfo's Gres) is
a warning too, asked only where sinfo answers. The rules (``resolve_local``, ``fewer_gpus_line``)
are pure; ``site_facts`` is the one runner the api calls. ``init_local`` writes a profile from
this machine for ``site init NAME --local``, each figure with where it came from.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import machine as probing
from hpc_grpo.preflight import siteinit
from hpc_grpo.preflight.links import read_measurement
from hpc_grpo.preflight.machine import Gpu, Machine
from hpc_grpo.preflight.node_job import runs_on
from hpc_grpo.scheduler import slurm


@dataclass(frozen=True)
class SiteFacts:
    """The site to plan with, where its GPU figures came from ("": the profile's own), and the
    warning lines every plan and submit with it shows."""

    site: SiteProfile
    source: str = ""
    warnings: tuple[str, ...] = ()
    refused: tuple[UserError, ...] = ()  # what submit refuses (plan shows it as a warning)


BUSY_SHARE = 0.1  # of a card's memory in use by other processes: the card is taken


def busy_gpus(site: SiteProfile, found: Machine) -> SiteFacts:
    """A local plan takes every GPU it plans with whole (vLLM's share of each card, the
    trainer's rest): a card another process holds more than BUSY_SHARE of (a second local run,
    a notebook) would fail minutes into the job, at the engine's start. The warning for plan,
    the refusal for submit, naming the free cards to use instead."""
    def busy(g: Gpu) -> bool:
        return g.used_mib is not None and g.used_mib > BUSY_SHARE * g.memory_mib

    planned = found.gpus[:site.gpus_per_node]
    taken = [g for g in planned if busy(g)]
    if not taken:
        return SiteFacts(site)
    free = [str(g.index) for g in found.gpus if g.used_mib is not None and not busy(g)]
    listed = ", ".join(f"GPU {g.index} {g.used_mib:,} of {g.memory_mib:,} MiB" for g in taken)
    line = (f"site '{site.name}' plans {len(planned)} GPU(s) whole, but other processes hold "
            f"memory on {listed} (nvidia-smi's memory.used): the run would fail when its vLLM "
            "engine starts")
    hint = (f"CUDA_VISIBLE_DEVICES={','.join(free)} before hpc-grpo trains on the free "
            f"card(s) only" if free else
            "wait until they are free (`hpc-grpo status` lists the runs; `nvidia-smi` names "
            "the processes)")
    return SiteFacts(site, warnings=(f"{line}: {hint} (submit refuses this)",),
                     refused=(UserError(line, field="site", hint=hint),))


def machine_line(found: Machine) -> str:
    """``this machine: 1 x NVIDIA H200 143,771 MiB, from nvidia-smi; 16 CPUs, 1,007.5 GiB
    (MemTotal of /proc/meminfo)``: the figures a resolved local profile plans with."""
    return (f"this machine: {found.gpus_line()}; {found.cpus} CPUs, {found.memory_gib:,} GiB "
            f"({found.memory_source})")


def machine_figures(found: Machine) -> dict[str, Any]:
    """The profile values this machine gives, in a profile's order: the one mapping of the probe
    onto a profile, which ``resolve_local`` plans with (``gpus_per_node: auto``) and
    ``local_profile_lines`` writes (``site init --local``); they once made it each on their own.
    One training process per GPU, one without GPUs; at least one CPU."""
    count = len(found.gpus)
    return {"gpus_per_node": count, "gpu_type": found.gpu_type,
            "gpu_memory_gib": found.gpu_memory_gib, "cpus_per_node": max(found.cpus, 1),
            "cpu_memory_gib": found.memory_gib, "procs_per_node": count or 1}


def resolve_local(site: SiteProfile, found: Machine) -> SiteFacts:
    """A local site's profile for this machine. ``gpus_per_node: auto`` with GPUs found: one
    process per GPU, the GPU, CPU and memory figures the machine's; without GPUs the profile
    stands as written (the CPU profile, unchanged), with a warning where nvidia-smi lists no
    usable GPU (CUDA_VISIBLE_DEVICES hid them all), refused where it failed or did not answer.
    An explicit 0 with GPUs found: the CPU plan, and one line saying so."""
    if runs_on(site):  # Slurm's nodes, not this machine
        return SiteFacts(site)
    if not found.gpus:
        if site.gpus_auto and found.gpus_unknown:  # a guess would train on the CPU unasked
            raise UserError(
                f"site '{site.name}' reads this machine's GPUs, but {found.gpu_source}",
                field="site", hint="fix the driver until `nvidia-smi` answers, or train on the "
                "CPU with a profile of gpus_per_node: 0 (`hpc-grpo site init NAME --local` on a "
                "machine without GPUs writes one)")
        broken = site.gpus_auto and found.gpu_source != "nvidia-smi not found"
        return SiteFacts(site, warnings=(
            f"site '{site.name}' plans for the CPU: {found.gpu_source}",) * broken)
    if site.gpus_auto:
        figures = machine_figures(found)
        figures["cpu_memory_gib"] = figures["cpu_memory_gib"] or site.cpu_memory_gib  # unread
        resolved = busy_gpus(dataclasses.replace(site, **figures), found)
        return dataclasses.replace(resolved, source=machine_line(found))
    if site.gpus_per_node == 0:
        return SiteFacts(site, warnings=(
            f"site '{site.name}' trains on the CPU although this machine has "
            f"{found.gpus_line()}: set gpus_per_node: auto in its profile, or write one with "
            "`hpc-grpo site init NAME --local` and use --site NAME",))
    return busy_gpus(site, found)


def fewer_gpus_line(site: SiteProfile, gres: Sequence[str]) -> str:
    """A warning when every node of the partition has more GPUs than the profile uses (sinfo's
    Gres per node, ``siteinit.parse_gres``'s reading); "" when it uses them all, when the
    nodes differ so that some have no more, or when sinfo gave nothing. The least node counts:
    a profile written for it fits every node, as ``site init`` writes it."""
    counts = [siteinit.parse_gres(text) for text in gres]
    least = min((n for n, _ in counts), default=0)
    if least <= site.gpus_per_node:
        return ""
    kind = Counter(k for n, k in counts if n).most_common(1)[0][0]
    where = f"partition '{site.partition}'" if site.partition else "the default partition"
    return (f"site '{site.name}' uses {site.gpus_per_node} GPUs per node but every node of "
            f"{where} has {least}{f' {kind}' if kind else ''} (sinfo's Gres): set "
            f"gpus_per_node: {least} in its profile to train on all of them")


def site_facts(site: SiteProfile) -> SiteFacts:
    """Ask the hardware a site runs on and apply the rules above: nvidia-smi for a local site,
    sinfo for a Slurm one (skipped quietly where there is no sinfo: a laptop planning for a
    cluster)."""
    if not runs_on(site):
        return resolve_local(site, probing.probe())
    gres = slurm.partition_gres(site.partition)
    line = fewer_gpus_line(site, gres) if gres else ""
    return SiteFacts(site, warnings=(line,) if line else ())


def local_profile_lines(found: Machine, header: str, python: str = "",
                        links: list[str] | None = None) -> str:
    """A local profile for this machine (YAML with comments), every figure saying where it
    came from; one training process per GPU, or one on a machine without GPUs."""
    value = json.dumps
    figures = machine_figures(found)
    count = figures["gpus_per_node"]
    described = f"this machine: {found.gpus_line().rsplit(', ', 1)[0]}, {found.cpus} CPUs"
    names = sorted({g.name for g in found.gpus})
    lines = [
        f"# {header}",
        "# Every value below is this machine's: check it, then `hpc-grpo plan --site NAME`.",
        f"description: {value(described)}",
        "scheduler: local  # submit runs the job script here (bash, timeout for its time)",
        f"gpus_per_node: {count}  # {found.gpus_line()}",
        f"gpu_type: {value(figures['gpu_type'])}"
        + (f"  # from nvidia-smi's name {', '.join(names)}" if names else ""),
        f"gpu_memory_gib: {figures['gpu_memory_gib']:g}"
        + (f"  # memory.total of nvidia-smi, the smallest card: "
           f"{min(g.memory_mib for g in found.gpus):,} MiB" if count else ""),
        f"cpus_per_node: {figures['cpus_per_node']}  # the CPUs this process may use "
        "(os.sched_getaffinity)",
        f"cpu_memory_gib: {figures['cpu_memory_gib']:g}  # {found.memory_source}",
        f"procs_per_node: {figures['procs_per_node']}  # "
        + ("one training process per GPU" if count else "one training process: no GPU"),
        'max_time: "24:00:00"  # the most a job runs before its stop save; resume continues it',
        f"python: {value(python)}  # the interpreter the job runs, with hpc-grpo[runtime]",
        "env: {}  # exported in the job (HF_HUB_OFFLINE...); secrets go in secret_env",
        "secret_env: []  # secret names beside HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY",
        *(links if links is not None else siteinit.link_lines(None)),
        "output_write_gbs: null  # GB/s of the output root's writes. null: assumed",
        "output_root: ~/hpc-grpo-runs  # where run directories go",
        'run_dir_mode: "0700"  # run directories are yours only',
        "nodes_online: true  # this machine reaches the hub as hpc-grpo here does",
        'hf_home: ""  # the Hugging Face cache the job uses; "": your default',
        *siteinit.requeue_lines(None),
    ]
    return "\n".join(lines) + "\n"


def init_local(name: str, *, output: str = "", force: bool = False) -> Path:
    """``site init NAME --local``: a profile of this machine, refused over an existing file
    without ``force`` and written only once it loads, as the Slurm path does."""
    path = siteinit.target(name, output, force)
    found = probing.probe()
    links = siteinit.link_lines(read_measurement(path.stem))
    text = local_profile_lines(found, siteinit.header(name, " --local"), sys.executable, links)
    return siteinit.write_checked(path, text)


def init(name: str, *, partition: str = "", output: str = "", force: bool = False,
         local: bool = False) -> Path:
    """``site init``: from Slurm, or from this machine with ``local`` or where no Slurm
    command is on PATH (a workstation)."""
    if not (local or not slurm.present()):
        return siteinit.init_site(name, partition=partition, output=output, force=force)
    if partition:
        raise UserError("--partition names a Slurm partition; a local profile has none",
                        field="partition", hint="leave out --partition, or run on the cluster")
    return init_local(name, output=output, force=force)
