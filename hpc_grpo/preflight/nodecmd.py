"""What ``doctor``'s srun runs on each node: the probe under the job's modules and container
(``wrapped``: any command so, e.g. an export job's), and the profile's job flags.

Modules are loaded the way the job script loads them (Lmod initialised when the shell has no
``module`` function yet), one by one, and each outcome is handed to the probe, so a module that
does not load is a named finding, not a node that never reported. Apptainer's presence is looked
for on the node before its ``exec``; without it the host's Python (if any) still reports the
rest. The probe itself then runs inside the container, so its ``scontrol`` check is the one the
requeue path needs (submitit calls scontrol from inside the job's processes).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Literal

from hpc_grpo.config.site import SiteProfile

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


def apptainer_lines(site: SiteProfile, probe: list[str]) -> list[str]:
    """Bash that runs the probe in the image with apptainer (or singularity), or says neither
    is on the node's PATH and runs it on the host."""
    box = site.container
    assert box is not None
    options = [*(["--nv"] if site.gpus_per_node else []),
               *(w for mount in box.mounts for w in ("--bind", mount)), box.image]
    missing = "missing: neither apptainer nor singularity is on PATH of the node"
    return [
        "if command -v apptainer >/dev/null 2>&1; then b=apptainer",
        "elif command -v singularity >/dev/null 2>&1; then b=singularity",
        f"else export HPC_GRPO_PROBE_CONTAINER={shlex.quote(missing)}",
        f"  echo \"hpc-grpo: {missing} $(hostname)\" >&2; exec {shlex.join(probe)}",
        "fi",
        f"exec \"$b\" exec {shlex.join(options)} {shlex.join(probe)}",
    ]


def allocation_options(site: SiteProfile, partition: str) -> list[str]:
    """The profile's partition (or the one asked for), account and QOS: the flags every job of
    the site carries (doctor's srun, an export job's sbatch; the training script's #SBATCH)."""
    return [f"--{flag}={value}" for flag, value in
            (("partition", partition), ("account", site.account), ("qos", site.qos)) if value]


def pyxis_options(site: SiteProfile) -> list[str]:
    """srun's container options of a pyxis profile (none for another runtime or none)."""
    box = site.container
    if box is None or box.runtime != "pyxis":
        return []
    return ["--container-image", box.image,
            *(["--container-mounts", ",".join(box.mounts)] if box.mounts else [])]


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


def pyxis_found(srun_help: str) -> tuple[Literal["pass", "fail"], str]:
    """Whether this Slurm's srun has pyxis's container options (a SPANK plugin: without it srun
    refuses --container-image and no job of a pyxis profile can start)."""
    if "--container-image" in srun_help:
        return "pass", "srun --help lists --container-image (pyxis)"
    return "fail", ("srun --help lists no --container-image: pyxis is not installed here (the "
                    "probe ran without the container)")
