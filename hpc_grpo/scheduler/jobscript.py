"""How every job of a site asks Slurm for its allocation and runs its command: the one builder of
the training script's allocation lines (render passes them to the template), ``doctor``'s srun
on each node (the probe under the job's modules and container: ``wrapped``, ``node_command``)
and a side job's script (``side_job_script``: an export run as a job).

Modules are loaded the way the job script loads them (Lmod initialised when the shell has no
``module`` function yet), one by one, and each outcome is handed to the probe, so a module that
does not load is a named finding, not a node that never reported. Apptainer's presence is looked
for on the node before its ``exec``; without it the host's Python (if any) still reports the
rest. The probe itself then runs inside the container, so its ``scontrol`` check is the one the
requeue path needs (submitit calls scontrol from inside the job's processes).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.scheduler.slurm import one_task_step

# Where Lmod / Environment Modules put their shell setup (the job script tries the same list).
MODULE_INITS = ("/etc/profile.d/lmod.sh", "/usr/share/lmod/lmod/init/bash", "/etc/profile.d/modules.sh")


def module_lines(modules: Sequence[str]) -> list[str]:
    """Bash that loads each module and exports HPC_GRPO_PROBE_MODULES ("ok NAME"/"fail NAME")."""
    inits = " ".join(MODULE_INITS)
    names = " ".join(shlex.quote(m) for m in modules)
    return [
        "if ! declare -F module >/dev/null; then",
        f"  for i in {inits}; do if [ -r \"$i\" ]; then set +u; . \"$i\"; set -u; break; fi; done",
        "fi",
        "hpc_grpo_modules=''",
        f"for m in {names}; do",
        "  if module load \"$m\"; then s=ok; else s=fail; fi",
        "  hpc_grpo_modules+=\"$s $m\"$'\\n'",
        "done",
        "export HPC_GRPO_PROBE_MODULES=\"$hpc_grpo_modules\"",
    ]


def apptainer_options(site: SiteProfile) -> list[str]:
    """``apptainer exec``'s options of an apptainer profile: GPUs, the mounts, the image."""
    box = site.container
    assert box is not None and box.runtime == "apptainer"
    return [*(["--nv"] if site.gpus_per_node else []),
            *(w for mount in box.mounts for w in ("--bind", mount)), box.image]


def apptainer_lines(site: SiteProfile, probe: list[str]) -> list[str]:
    """Bash that runs the probe in the image with apptainer (or singularity), or says neither
    is on the node's PATH and runs it on the host."""
    options = apptainer_options(site)
    missing = "missing: neither apptainer nor singularity is on PATH of the node"
    return [
        "if command -v apptainer >/dev/null 2>&1; then b=apptainer",
        "elif command -v singularity >/dev/null 2>&1; then b=singularity",
        f"else export HPC_GRPO_PROBE_CONTAINER={shlex.quote(missing)}",
        f"  echo \"hpc-grpo: {missing} $(hostname)\" >&2; exec {shlex.join(probe)}",
        "fi",
        f"exec \"$b\" exec {shlex.join(options)} {shlex.join(probe)}",
    ]


def gpu_request(site: SiteProfile) -> str:
    """The profile's GPUs per node as its cluster wants them asked for (``gpu_request``: the
    generic resource, or ``--gpus-per-node``), "" for a profile without GPUs."""
    if not site.gpus_per_node:
        return ""
    count = f"{site.gpu_type}:{site.gpus_per_node}" if site.gpu_type else str(site.gpus_per_node)
    return f"--gres=gpu:{count}" if site.gpu_request == "gres" else f"--gpus-per-node={count}"


def allocation_options(site: SiteProfile, partition: str) -> list[str]:
    """The profile's partition (or the one asked for), account and QOS: the flags every job of
    the site carries (doctor's srun, an export job's sbatch; the training script's #SBATCH)."""
    return [f"--{flag}={value}" for flag, value in
            (("partition", partition), ("account", site.account), ("qos", site.qos)) if value]


def job_cpus(site: SiteProfile) -> int:
    """The CPUs the training job holds on each node: one task of ``cpus_per_node`` CPUs (the
    script's --ntasks-per-node=1 and --cpus-per-task)."""
    return site.cpus_per_node


@dataclass(frozen=True)
class JobMemory:
    """The memory Slurm allows the training job on each node; ``mib`` None where Slurm sets no
    limit (the node's memory is the job's); ``why`` names the setting it follows."""

    mib: int | None
    why: str


def _mib(value: str | None) -> int | None:
    """A DefMemPer* value in MiB; None where unset, 0 or UNLIMITED (no default)."""
    value = (value or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def job_memory(site: SiteProfile, partition: str, settings: Mapping[str, str],
               config: Mapping[str, str]) -> JobMemory:
    """What Slurm gives the training job per node, which asks no --mem or --mem-per-cpu: the
    partition's DefMemPerNode or DefMemPerCPU (x the job's CPUs), else the cluster's
    (``settings``: ``scontrol show partition``'s record, ``config``: ``scontrol show config``'s).
    Memory is limited only where SelectTypeParameters makes it a consumable (CR_*_MEMORY). Doctor
    reported the node's 23.5 GiB where DefMemPerCPU gave the job 3.9 (#58). Pure."""
    if "MEMORY" not in config.get("SelectTypeParameters", "MEMORY").upper():
        return JobMemory(None, f"SelectTypeParameters={config.get('SelectTypeParameters')}: Slurm "
                               "does not allocate memory")
    cpus, gpus = job_cpus(site), site.gpus_per_node
    for source, where in ((settings, f"partition {partition}"), (config, "the cluster's")):
        node, per_cpu = _mib(source.get("DefMemPerNode")), _mib(source.get("DefMemPerCPU"))
        per_gpu = _mib(source.get("DefMemPerGPU") or _job_defaults(source).get("DefMemPerGPU"))
        if node:
            return JobMemory(node, f"DefMemPerNode {node} MiB of {where}")
        if per_gpu and gpus:  # a GPU partition's usual default (JobDefaults=DefMemPerGPU=...)
            return JobMemory(per_gpu * gpus, f"DefMemPerGPU {per_gpu} MiB x {gpus} GPUs of {where}")
        if per_cpu:
            return JobMemory(per_cpu * cpus, f"DefMemPerCPU {per_cpu} MiB x {cpus} CPUs of {where}")
    return JobMemory(None, "no DefMemPerNode, DefMemPerGPU or DefMemPerCPU: the node's memory")


def _job_defaults(record: Mapping[str, str]) -> dict[str, str]:
    """A partition's ``JobDefaults=DefCpuPerGPU=2,DefMemPerGPU=16000`` as a mapping."""
    pairs = (item.partition("=") for item in record.get("JobDefaults", "").split(","))
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def pyxis_options(site: SiteProfile) -> list[str]:
    """srun's container options of a pyxis profile (none for another runtime or none)."""
    box = site.container
    if box is None or box.runtime != "pyxis":
        return []
    return ["--container-image", box.image,
            *(["--container-mounts", ",".join(box.mounts)] if box.mounts else [])]


def pyxis_found(srun_help: str) -> tuple[Literal["pass", "fail"], str]:
    """Whether this Slurm's srun has pyxis's container options (a SPANK plugin: without it srun
    refuses --container-image and no job of a pyxis profile can start)."""
    if "--container-image" in srun_help:
        return "pass", "srun --help lists --container-image (pyxis)"
    return "fail", ("srun --help lists no --container-image: pyxis is not installed here (the "
                    "probe ran without the container)")


def wrapped(site: SiteProfile, argv: Sequence[str]) -> list[str]:
    """``argv`` under the profile's modules and apptainer image (bash -c), as it is where the
    profile has neither (a pyxis image comes from srun's options: ``pyxis_options``)."""
    box = site.container
    lines = ["set -u", *(module_lines(site.modules) if site.modules else [])]
    if box is not None and box.runtime == "apptainer":
        lines += apptainer_lines(site, list(argv))
    elif site.modules:
        lines.append(f"exec {shlex.join(argv)}")
    else:
        return list(argv)
    return ["bash", "-c", "\n".join(lines)]


def node_command(site: SiteProfile, python: str, probe_args: Sequence[str],
                 module: str = "hpc_grpo.runtime.probe") -> list[str]:
    """The probe's command line (or another runtime ``module``'s, e.g. the link measurement),
    wrapped in bash where modules or apptainer come first."""
    box = site.container
    runtime = box.runtime if box is not None else ""
    return wrapped(site, [python, "-m", module, *probe_args,
                          *(["--container", runtime] if runtime else [])])


def side_job_script(site: SiteProfile, run_dir: Path, argv: list[str], comment: str,
                    package_root: str) -> str:
    """A side job's script (an export as a job): the profile's env, then ``argv`` under its
    modules and container (apptainer and modules in bash; a pyxis image through an srun step,
    as training's). ``package_root`` goes first on PYTHONPATH (a checkout's package, as the node
    task's)."""
    pyxis = pyxis_options(site)
    launch = [*(one_task_step(pyxis) if pyxis else []), *wrapped(site, argv)]
    lines = ["#!/bin/bash", f"# {comment.replace(chr(10), ' ')}",
             f"export PYTHONPATH={shlex.quote(package_root)}${{PYTHONPATH:+:$PYTHONPATH}}",
             *(f"export {key}={shlex.quote(value)}" for key, value in sorted(site.public_env.items())),
             f"cd {shlex.quote(str(run_dir))}", shlex.join(launch)]  # no exec: the local back
    return "\n".join(lines) + "\n"  # end knows its job by the script in bash's argv
