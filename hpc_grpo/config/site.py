"""Site profiles: everything about one cluster that a job script needs, in one YAML file.

Profiles ship in ``site_configs/`` and users add their own in ``~/.config/hpc-grpo/sites``
(or ``$HPC_GRPO_SITES``); ``--site`` takes a name or a path.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hpc_grpo.config.strict import from_mapping, read_yaml
from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.rundir.contract import (
    DEFAULT_MAX_REQUEUES,
    DEFAULT_PORT_RANGE,
    DEFAULT_REQUEUE_SIGNAL,
    DEFAULT_SIGNAL_LEAD_S,
    DEFAULT_WATCHDOG_MIN_S,
    DEFAULT_WATCHDOG_STARTUP_S,
    PORTS_PER_JOB,
    REQUEUE_SIGNALS,
)

# Environment names whose values are secrets wherever a profile sets them: never written into a
# job script, run.json or plan.txt; the job gets them from the submitting environment instead.
DEFAULT_SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")

# How to find a profile's memory figures, for the lines that refuse one that is wrong or missing.
CPU_MEMORY_HINT = ("the memory a job may use per node, in GiB: RealMemory of `scontrol show node "
                   "NODE` divided by 1024, which `hpc-grpo site init` writes")
GPU_MEMORY_HINT = ("the memory of one GPU, in GiB (80 for an H100 80GB), which `hpc-grpo site init` "
                   "guesses from the Gres type")
_NUMBER = re.compile(r"[0-9]+")
TIME_FORMS = ("minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
              "days-hours:minutes", "days-hours:minutes:seconds")


def minutes(value: str, where: str) -> int:
    """A Slurm time limit in whole minutes, seconds rounded up as Slurm does.

    Exactly sbatch's forms (``TIME_FORMS``): without a day the colon-separated parts are
    minutes[:seconds] or hours:minutes:seconds, but after ``D-`` they are hours[:minutes[:seconds]]
    (``1-12:30`` is 36 h 30 min, not 24 h 12 min 30 s). Whatever amounts to zero (``0``, ``0:0``)
    is refused: Slurm takes ``--time=0`` as no limit at all, which would bypass the site's
    max_time (a profile's max_time of zero would cap nothing either)."""
    text = value.strip()
    days_text, dash, rest = text.rpartition("-")
    parts = rest.split(":")
    numbers = [days_text] * bool(dash) + parts
    if len(parts) > 3 or not all(_NUMBER.fullmatch(n) for n in numbers):
        raise UserError(f"'{value}' is not a Slurm time", field=where,
                        hint=f"Slurm's forms: {', '.join(TIME_FORMS)}; e.g. 04:00:00 or 1-12:00")
    ints = [int(p) for p in parts]
    if dash:  # days-hours[:minutes[:seconds]]
        days, (hours, mins, secs) = int(days_text), (ints + [0, 0])[:3]
    elif len(ints) == 3:  # hours:minutes:seconds
        days, (hours, mins, secs) = 0, ints
    else:  # minutes[:seconds]
        days, hours, (mins, secs) = 0, 0, (ints + [0])[:2]
    total = days * 1440 + hours * 60 + mins + (1 if secs else 0)
    if total == 0:
        raise UserError(f"a time limit of '{value}' is zero, which Slurm takes as no limit at all",
                        field=where, hint="give the time the job needs, e.g. 04:00:00 or 1-00:00; "
                        "requeues continue the run")
    return total


def _strings(value: object) -> Iterator[str]:
    """Every string in a profile value: itself, or inside its list, mapping or container."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif dataclasses.is_dataclass(value):
        yield from _strings(vars(value))


@dataclass(frozen=True)
class Container:
    runtime: Literal["pyxis", "apptainer"]
    image: str
    mounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class SiteProfile:
    name: str
    scheduler: Literal["slurm", "local"] = "slurm"
    description: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    gpus_per_node: int = 0
    # Set by ``gpus_per_node: auto`` (a local site only): the launcher reads this machine's
    # GPUs, CPUs and memory before planning (preflight/local_site.py); without GPUs the
    # profile's own figures stand. Never set on a profile ``site init`` writes: those are figures.
    gpus_auto: bool = False
    gpu_type: str = ""
    gpu_memory_gib: float = 0.0
    gpu_request: Literal["gres", "gpus-per-node"] = "gres"
    cpus_per_node: int = 1
    cpu_memory_gib: float = 0.0
    procs_per_node: int = 0  # 0: one per GPU, or 1 on a CPU-only site
    exclusive: bool = False
    max_time: str = "24:00:00"
    max_nodes: int = 0  # 0: ask Slurm at submit time
    modules: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    container: Container | None = None
    network_interface: str = ""
    requeue_signal: str = DEFAULT_REQUEUE_SIGNAL
    signal_lead_s: int = DEFAULT_SIGNAL_LEAD_S
    port_range: tuple[int, ...] = DEFAULT_PORT_RANGE
    output_root: str = "~/hpc-grpo-runs"
    python: str = ""  # empty: the python running hpc-grpo
    max_requeues: int = DEFAULT_MAX_REQUEUES
    preempt_partition: str = ""
    secret_env: tuple[str, ...] = ()  # more secret names beside DEFAULT_SECRET_ENV
    run_dir_mode: str = "0700"  # run directories: the user's only, unless the site shares them
    # The shared Hugging Face cache (HF_HOME) that `hpc-grpo stage` fills on the login node and
    # the ranks read; it must be on a filesystem every node mounts. "": none, the nodes' default.
    hf_home: str = ""
    # Whether compute nodes reach the internet (the hub). None: the profile does not say; a hub
    # model that is not staged is then a warning, not an error (docs/quickstart-cluster.md).
    nodes_online: bool | None = None
    watchdog_startup_s: int = DEFAULT_WATCHDOG_STARTUP_S  # hang watchdog: up to the first step
    watchdog_min_s: int = DEFAULT_WATCHDOG_MIN_S  # hang watchdog: least wait once steps are timed
    # The links, in GB/s of an all-reduce's bus bandwidth (nccl-tests' busbw). None: not declared,
    # the plan takes doctor's cached measurement, else assumes (preflight/links.py). Declared,
    # they are the user's word and win over a measurement; plan says when the two disagree.
    inter_node_gbs: float | None = None
    intra_node_gbs: float | None = None
    # The output file system's write bandwidth in GB/s per node, all ranks of a node writing
    # their checkpoint parts at once. None: doctor's cached measurement for the output root
    # (`doctor --output-bandwidth`), else an assumed figure (preflight/output_write.py).
    output_write_gbs: float | None = None
    # The preemptible partition's GraceTime (`scontrol show partition`, written by `site init`):
    # the seconds a preempted job gets between its signal and the kill. None: not known, the
    # plan checks the stop save against signal_lead_s alone; 0: killed at once.
    grace_time_s: int | None = None

    def __post_init__(self) -> None:
        self._refuse_what_no_script_can_carry()
        if (len(self.port_range) != 2 or not 1024 <= self.port_range[0] < 65536
                or not self.port_range[0] + PORTS_PER_JOB - 1 <= self.port_range[1] < 65536):
            raise UserError(
                f"port_range must be [low, high] within 1024-65535, at least {PORTS_PER_JOB} ports, "
                f"got {list(self.port_range)}",
                field="port_range",
                hint=f"each job takes {PORTS_PER_JOB} ports: rendezvous, vLLM server, weight-sync group",
            )
        if self.requeue_signal not in REQUEUE_SIGNALS:
            raise UserError(
                f"requeue_signal {self.requeue_signal} is not one of {', '.join(REQUEUE_SIGNALS)}",
                field="requeue_signal",
            )
        minutes(self.max_time, "max_time")
        self._refuse_numbers_a_job_cannot_use()
        if self.scheduler == "local":
            self._refuse_what_a_local_run_cannot_apply()
        elif self.gpus_auto:
            raise UserError("gpus_per_node: auto reads the GPUs of the machine running hpc-grpo, "
                            "which are not the compute nodes'", field="gpus_per_node",
                            hint="give the nodes' GPU count (`hpc-grpo site init` reads it from "
                            "Slurm), or use auto on a local site")
        for key in ("watchdog_startup_s", "watchdog_min_s"):
            if getattr(self, key) < 1:
                raise UserError(f"{key} must be at least 1 second, got {getattr(self, key)}",
                                field=key, hint="the hang watchdog's bounds (docs/troubleshooting.md)")
        for key, where in (("inter_node_gbs", "between nodes"), ("intra_node_gbs", "inside a node")):
            value = getattr(self, key)
            if value is not None and not 0 < value < 1e5:
                raise UserError(f"{key} must be a positive number of GB/s, got {value:g}",
                                field=key, hint=f"the all-reduce bus bandwidth {where} (e.g. 25 on "
                                "200 Gb/s InfiniBand), or leave it out: `hpc-grpo doctor --site "
                                f"{self.name} --bandwidth` measures it")
        if self.output_write_gbs is not None and not 0 < self.output_write_gbs < 1e5:
            raise UserError(f"output_write_gbs must be a positive number of GB/s, got "
                            f"{self.output_write_gbs:g}", field="output_write_gbs",
                            hint="the output file system's write bandwidth per node, all its ranks "
                            f"writing at once, or leave it out: `hpc-grpo doctor --site {self.name} "
                            "--output-bandwidth` measures it")
        if self.grace_time_s is not None and not 0 <= self.grace_time_s <= 65535:
            raise UserError(f"grace_time_s must be from 0 to 65535 seconds, got {self.grace_time_s}",
                            field="grace_time_s", hint="GraceTime of `scontrol show partition "
                            "NAME` for the preemptible partition, or leave it out")
        try:
            mode = int(self.run_dir_mode, 8)
        except ValueError:
            mode = -1
        if not 0o700 <= mode <= 0o777:
            raise UserError(f"run_dir_mode {self.run_dir_mode!r} is not an octal mode from 0700 to "
                            "0777", field="run_dir_mode",
                            hint="e.g. 0700 (you only) or 0750 (your group may read)")

    def _refuse_numbers_a_job_cannot_use(self) -> None:
        """The profile's counts and sizes go into #SBATCH lines and the plan as they are: a
        negative or zero count rendered ``--cpus-per-task=-4`` or ``--signal=USR2@-5`` (sbatch
        refuses it, or worse takes it), and surfaced later as "world_size is -2" or "use --nodes
        -3 or fewer", naming no profile key. Refused here, naming the key."""
        for key, least, what, hint in (
                ("cpus_per_node", 1, "a positive integer", "the CPUs of a node the job may use"),
                ("gpus_per_node", 0, "0 or a positive integer", "0 on a CPU-only partition"),
                ("procs_per_node", 0, "0 or a positive integer",
                 "0: one training process per GPU, or 1 on a CPU site"),
                ("max_nodes", 0, "0 or a positive integer", "0: ask Slurm at submit"),
                ("max_requeues", 0, "0 or a positive integer",
                 "automatic retries after a crash; 0: none"),
                ("signal_lead_s", 1, "from 1 to 65535",
                 "seconds before the time limit that the job is signalled to checkpoint (sbatch's "
                 "--signal range)")):
            value = getattr(self, key)
            if value < least or (key == "signal_lead_s" and value > 65535):
                raise UserError(f"{key} must be {what}, got {value}", field=key, hint=hint)
        for key, per, hint in (("gpu_memory_gib", "GPU", GPU_MEMORY_HINT),
                               ("cpu_memory_gib", "node", CPU_MEMORY_HINT)):
            value = getattr(self, key)
            if not 0 <= value < math.inf:
                raise UserError(f"{key} must be 0 (not declared) or a positive number of GiB "
                                f"per {per}, got {value:g}", field=key, hint=hint)

    def _refuse_what_no_script_can_carry(self) -> None:
        """The name is written into the job script's header comment, unquoted: a line break in
        it would start a line bash runs as a command (above the #SBATCH lines, so sbatch would
        also stop reading them). A NUL byte fits no shell word, argument or environment value:
        anywhere in the script it makes bash refuse the whole file as binary."""
        if not self.name.isprintable():
            raise UserError(f"{self.name!r} holds a line break or control character",
                            field="name", hint="a single line of printable characters")
        for key, value in vars(self).items():
            if any("\0" in text for text in _strings(value)):
                raise UserError("a value holds a NUL character, which no shell script can carry",
                                field=key, hint="remove the \\0 from the profile")

    def _refuse_what_a_local_run_cannot_apply(self) -> None:
        """A local run is this machine running the rendered script: no Slurm to load modules
        into the job or start a container around it. Saying so at load time beats a profile
        whose modules silently never apply (what render shows is what runs)."""
        for key, value, hint in (
                ("modules", self.modules, "load them in the shell that runs hpc-grpo submit"),
                ("container", self.container, "run hpc-grpo inside the container instead")):
            if value:
                raise UserError(f"{key} cannot apply to a local site (no Slurm job to apply "
                                f"them to)", field=key, hint=f"{hint}, and remove {key}: here")

    @property
    def nodes_offline(self) -> bool | None:
        """True when the nodes cannot reach the hub: said by ``nodes_online: false`` or implied
        by ``HF_HUB_OFFLINE=1`` in the profile's env; False online (the local site is this
        machine); None when the profile does not say."""
        if self.nodes_online is not None:
            return not self.nodes_online
        if self.env.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
            return True
        return False if self.scheduler == "local" else None

    @property
    def nodes_reach_hub(self) -> bool:
        """Whether the profile says its nodes reach the hub (a job or node task may push from
        there); unsaid is no."""
        return self.nodes_offline is False

    @property
    def hf_home_path(self) -> str:
        """hf_home with ``~`` and ``$VARS`` expanded on this (login) node, absolute; "" unset."""
        if not self.hf_home:
            return ""
        return str(Path(os.path.expandvars(self.hf_home)).expanduser().absolute())

    @property
    def secret_names(self) -> frozenset[str]:
        return frozenset((*DEFAULT_SECRET_ENV, *self.secret_env))

    @property
    def public_env(self) -> dict[str, str]:
        """The profile's environment that may be written into the job script."""
        return {k: v for k, v in self.env.items() if k not in self.secret_names}

    @property
    def secret_values(self) -> dict[str, str]:
        """The profile's secret values: handed to sbatch's environment, never written to files."""
        return {k: v for k, v in self.env.items() if k in self.secret_names}

    @property
    def dir_mode(self) -> int:
        return int(self.run_dir_mode, 8)

    @property
    def default_procs_per_node(self) -> int:
        return self.procs_per_node or self.gpus_per_node or 1

    @property
    def device(self) -> str:
        return "cuda" if self.gpus_per_node > 0 else "cpu"


def builtin_sites_dir() -> Path:
    """``site_configs`` inside an installed wheel, else beside the package in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "site_configs", here.parent / "site_configs"):
        if candidate.is_dir():
            return candidate
    raise UserError("no site_configs directory found", hint="reinstall hpc-grpo")


def site_dirs(user_dirs: Sequence[Path]) -> list[Path]:
    """Where profiles are looked up by name, the user's own first."""
    return [*user_dirs, builtin_sites_dir()]


def user_site_dirs() -> list[Path]:
    """The user's profile folders: ``$HPC_GRPO_SITES`` (path-separated), then ~/.config's."""
    env = os.environ.get("HPC_GRPO_SITES")
    dirs = [Path(p).expanduser() for p in env.split(os.pathsep)] if env else []
    return dirs + [Path("~/.config/hpc-grpo/sites").expanduser()]


def find_site(name_or_path: str) -> SiteProfile:
    """The one site lookup every command uses: the user's folders first, then the shipped ones."""
    return load_site(name_or_path, site_dirs(user_site_dirs()))


@dataclass(frozen=True)
class SiteListing:
    """Every profile by name, the user's shadowing the shipped ones of the same name: those
    that load, and for each that does not its file and first problem. One broken profile in a
    folder stopped the listing of all the others (#58)."""

    loaded: dict[str, SiteProfile]
    broken: dict[str, tuple[Path, str]]


def all_sites() -> SiteListing:
    dirs = site_dirs(user_site_dirs())
    loaded: dict[str, SiteProfile] = {}
    broken: dict[str, tuple[Path, str]] = {}
    for name, path in sorted(available_sites(dirs).items()):
        try:
            loaded[name] = load_site(str(path), dirs)
        except UserError as exc:
            broken[name] = (path, exc.lines()[0].removeprefix("error: "))
    return SiteListing(loaded, broken)


def available_sites(dirs: Sequence[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in reversed(list(dirs)):
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                found[path.stem] = path
    return found


def load_site(name_or_path: str, dirs: Sequence[Path]) -> SiteProfile:
    """Resolve ``--site`` (a profile name or a YAML path) to a validated profile."""
    path = Path(name_or_path).expanduser()
    if not (name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path):
        sites = available_sites(dirs)
        if name_or_path not in sites:
            raise UserError(
                f"unknown site '{name_or_path}'",
                field="site",
                hint=did_you_mean(name_or_path, sites) + "; `hpc-grpo sites` lists them",
            )
        path = sites[name_or_path]
    data = read_yaml(path, "site profile")
    if not data:  # every key defaulted: it loaded as a Slurm site nobody described (#58)
        raise UserError(f"site profile {path} is empty (no keys, or only comments)", field="site",
                        hint=f"write its keys (`hpc-grpo site init {path.stem} --output {path}` "
                        "starts one from the cluster), or give a shipped site: `hpc-grpo sites`")
    data.setdefault("name", path.stem)
    if data.get("gpus_per_node") == "auto":  # this machine's, resolved before planning
        data = {**data, "gpus_per_node": 0, "gpus_auto": True}
    try:
        return from_mapping(SiteProfile, data, "")
    except UserError as exc:
        exc.field = f"{path.name}: {exc.field}" if exc.field else path.name
        raise
