"""``hpc-grpo site init``: a starting site profile written from what the live cluster says.

``scontrol show partition`` gives the partitions, the default one and their time and node limits;
``scontrol show node`` gives each node's CPUs, memory and GPUs (Gres). The parsers are pure; the
one function that asks Slurm and writes the file validates it with the strict loader, so what
lands on disk always loads. What Slurm cannot know (account, interface, shared output root) is
left as a commented line to fill in. Every requeue setting is written with its default and why:
a profile that leaves them out hides them, and the default signal lead (120 s) is longer than a
preemptible partition's GraceTime is on many clusters (60 s), so the lead is set below it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.config.site import SiteProfile, load_site, minutes, site_dirs, user_site_dirs
from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.preflight.links import Measured, links_line, read_measurement, site_links
from hpc_grpo.rundir.checkpoints import folder_blocked
from hpc_grpo.rundir.contract import PORTS_PER_JOB
from hpc_grpo.scheduler import slurm

_RECORD_START = re.compile(r"\n\s*\n|\n(?=(?:NodeName|PartitionName)=)")
_KEY = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_]*=)")
# Usable memory of common GPU types; where a type comes in several sizes, the smallest.
GPU_GIB = {"h100": 80, "h200": 141, "gh200": 96, "b200": 180, "a100": 40, "a40": 48, "l40s": 48,
           "l40": 48, "l4": 24, "a10": 24, "a10g": 24, "v100": 16, "mi250": 64, "mi300x": 192}


def parse_records(text: str) -> list[dict[str, str]]:
    """``scontrol show node|partition`` (multi-line or --oneliner) as one mapping per record.

    Values may hold spaces (``OS=Linux 6.1 #1 SMP``), so a field ends only where the next
    ``Key=`` begins."""
    records = []
    for chunk in _RECORD_START.split(text.strip()):
        fields: dict[str, str] = {}
        for token in _KEY.split(chunk.strip()):
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value.strip()
        if fields:
            records.append(fields)
    return records


def parse_gres(gres: str) -> tuple[int, str]:
    """GPUs in a Gres string: ``gpu:h100:8(S:0-1)`` -> (8, "h100"); per-socket entries add up;
    with several types, the most numerous (one job asks for one type)."""
    counts: Counter[str] = Counter()
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        number = re.match(r"\d+", parts[-1])
        if number:
            counts[parts[1] if len(parts) > 2 else ""] += int(number.group())
    if not counts:
        return 0, ""
    kind, count = counts.most_common(1)[0]
    return count, kind


def gpu_memory_gib(gpu_type: str) -> float:
    """GiB per GPU from its Gres type (``nvidia_a100-sxm4-80gb``, ``h100``); 0 when unknown."""
    lowered = gpu_type.lower()
    # a size anywhere in the name: Slurm's NVML autodetection writes nvidia_a100_80gb_pcie, where
    # "80gb" is followed by "_" (a word character, so no \b there)
    size = re.search(r"(?:^|[^a-z0-9])(\d+)\s*gi?b(?![a-z0-9])", lowered)
    if size:
        return float(size.group(1))
    for name in sorted(GPU_GIB, key=len, reverse=True):
        if name in re.split(r"[^a-z0-9]+", lowered):
            return float(GPU_GIB[name])
    return 0.0


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_time: str  # "" when unlimited
    max_nodes: int  # 0 when unlimited
    total_nodes: int
    preempt_mode: str
    grace_time_s: int = 0  # what a preempted job gets between its signal and the kill

    @property
    def requeues(self) -> bool:
        return self.preempt_mode.upper().startswith("REQUEUE")


def _int(value: str) -> int:
    match = re.match(r"\d+", value or "")
    return int(match.group()) if match else 0


def nodes_from(text: str) -> list[Node]:
    nodes = []
    for rec in parse_records(text):
        if "NodeName" not in rec:
            continue
        gpus, kind = parse_gres(rec.get("Gres", ""))
        nodes.append(Node(
            rec["NodeName"], _int(rec.get("CPUEfctv") or rec.get("CPUTot", "")),
            _int(rec.get("RealMemory", "")), gpus, kind,
            tuple(p for p in rec.get("Partitions", "").split(",") if p),
        ))
    return nodes


def partitions_from(text: str) -> list[Partition]:
    found = []
    for rec in parse_records(text):
        if "PartitionName" not in rec:
            continue
        limit = rec.get("MaxTime", "")
        found.append(Partition(
            rec["PartitionName"], rec.get("Default") == "YES",
            "" if limit.upper() in ("UNLIMITED", "INFINITE", "") else limit,
            _int(rec.get("MaxNodes", "")), _int(rec.get("TotalNodes", "")),
            rec.get("PreemptMode", ""), _int(rec.get("GraceTime", "")),
        ))
    return found


def _time(value: str) -> str:
    """Slurm's MaxTime as the profile writes it (``2-00:00:00``, ``02:00:00``)."""
    total = minutes(value, "max_time")
    days, rest = divmod(total, 1440)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def choose_partition(partitions: Sequence[Partition], wanted: str = "") -> Partition:
    if not partitions:
        raise UserError("Slurm lists no partitions", hint="run this on a login node of the cluster")
    by_name = {p.name: p for p in partitions}
    if wanted:
        if wanted not in by_name:
            raise UserError(f"no partition '{wanted}'", field="partition",
                            hint=did_you_mean(wanted, by_name))
        return by_name[wanted]
    return next((p for p in partitions if p.default), partitions[0])


def profile_lines(partition: Partition, nodes: Sequence[Node], partitions: Sequence[Partition],
                  header: str, python: str = "", measured: Measured | None = None) -> str:
    """The profile YAML (with comments) for ``partition``: the smallest node of it, so that a
    job the profile allows fits on every node. Every key of a profile is written, with its
    default and what it is for, so that nothing must be looked up (issue #27); ``python``: the
    interpreter running site init, the nodes' default."""
    members = [n for n in nodes if partition.name in n.partitions] or list(nodes)
    if not members:
        raise UserError(f"partition '{partition.name}' has no nodes", field="partition")
    small = min(members, key=lambda n: (n.gpus, n.cpus, n.memory_mb))
    mixed = len({(n.gpus, n.cpus, n.memory_mb) for n in members}) > 1
    gpus = f"{small.gpus} x {small.gpu_type or 'GPU'}" if small.gpus else "no GPUs"
    gib = round(small.memory_mb / 1024, 1)
    memory = gpu_memory_gib(small.gpu_type) if small.gpus else 0.0
    requeued = [p.name for p in partitions if p.requeues]
    # One preemptible partition beside a non-preemptible one is a clear choice; a cluster-wide
    # PreemptMode=REQUEUE marks them all, and then there is nothing to infer.
    preempt = requeued[0] if len(requeued) == 1 and partition.name not in requeued else ""
    described = f"{partition.name}: {len(members)} nodes x {small.cpus} CPUs, {gib} GiB, {gpus}"
    value = json.dumps  # JSON scalars are YAML scalars, quoted where YAML would misread them
    lines = [
        f"# {header}",
        "# Every value below is a starting point: check it, then `hpc-grpo doctor --site NAME`.",
        f"description: {value(described)}",
        "scheduler: slurm",
        f"partition: {value(partition.name)}",
        'account: ""  # set it where the cluster requires one (sacctmgr show assoc user=$USER)',
        'qos: ""',
        f"gpus_per_node: {small.gpus}",
        f"gpu_type: {value(small.gpu_type)}",
        f"gpu_memory_gib: {memory:g}"
        + ("  # guessed from the type; the planner relies on it" if small.gpus and memory
           else "  # unknown type: set the GiB per GPU, the planner relies on it" if small.gpus
           else ""),
        "gpu_request: gres",
        f"cpus_per_node: {small.cpus}",
        f"cpu_memory_gib: {gib:g}" + ("  # nodes differ: the smallest is shown" if mixed else ""),
        f"max_time: {value(_time(partition.max_time) if partition.max_time else '24:00:00')}"
        + ("" if partition.max_time else "  # the partition has no limit"),
        f"max_nodes: {partition.max_nodes}"
        + ("" if partition.max_nodes else f"  # 0: ask Slurm at submit (it has {len(members)})"),
        "procs_per_node: 0  # 0: one training process per GPU (1 on a CPU-only partition)",
        "exclusive: false  # true: whole nodes (#SBATCH --exclusive) where jobs share nodes",
        f"python: {value(python)}  # the interpreter every node runs, with hpc-grpo[runtime]: "
        "this one must exist there too (a shared venv), else name your module's or container's",
        "modules: []  # e.g. [cuda/12.4, nccl]: loaded in the job before the node tasks start",
        "env: {}  # exported in the job (NCCL_*, HF_HUB_OFFLINE...); secrets go in secret_env",
        "secret_env: []  # secret names beside HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY: "
        "passed through the environment, never written to a file",
        "# container: {runtime: pyxis, image: nvcr.io/nvidia/pytorch:25.01-py3, mounts: []}"
        "  # or runtime: apptainer with an .sif image",
        'network_interface: ""  # e.g. ib0 (NCCL/GLOO_SOCKET_IFNAME); doctor checks it on every node',
        *link_lines(measured),
        "output_write_gbs: null  # GB/s a node the output root writes, all its ranks at once. "
        "null: `hpc-grpo doctor --output-bandwidth`'s cached measurement, else assumed",
        "output_root: ~/hpc-grpo-runs  # must be visible from every node: doctor checks it",
        'run_dir_mode: "0700"  # run directories are yours only; "0750" shares them with your group',
        "# Hub models and datasets: most clusters' compute nodes have no internet, so this profile",
        "# says so; `hpc-grpo stage NAME --site NAME` downloads into hf_home on the login node and",
        "# submit refuses what is not staged. Set true only if the nodes reach huggingface.co.",
        "nodes_online: false",
        'hf_home: ""  # a shared folder every node mounts, e.g. /shared/$USER/hf-cache',
    ]
    if preempt:
        lines.append(f"preempt_partition: {value(preempt)}")
    by_name = {p.name: p for p in partitions}
    preemptible = partition if partition.requeues else by_name.get(preempt)
    return "\n".join([*lines, *requeue_lines(preemptible)]) + "\n"


def link_lines(measured: Measured | None) -> list[str]:
    """The two link keys, left unset (null): the plan then takes doctor's measurement, which
    stays current when measured again, where a figure written here would be the user's word and
    win over it (preflight/links.py); the comment says what is cached now, or that it is assumed."""
    lines = []
    for key, where in (("inter_node_gbs", "between nodes"), ("intra_node_gbs", "inside a node")):
        value = getattr(measured, key) if measured is not None else None
        now = (f"now {value:.3g}, {measured.source}" if measured is not None and value is not None
               else "assumed until `hpc-grpo doctor --bandwidth` measures it")
        lines.append(f"{key}: null  # GB/s {where}, all-reduce bus bandwidth. null: doctor's "
                     f"cached measurement, {now}; a figure here overrides it")
    return lines


def lead_within_grace(default_s: int, grace_s: int) -> int:
    """The signal lead for a preemptible partition: a quarter below its GraceTime (60 -> 45),
    so the checkpoint the signal starts is written before Slurm's kill; never above the default,
    and at least 1 s, the least lead a profile may have (a GraceTime of 1 s gave 0)."""
    return max(1, min(default_s, grace_s * 3 // 4)) if grace_s > 0 else default_s


def requeue_lines(preemptible: Partition | None) -> list[str]:
    """Every requeue setting with its default and why, the lead below the preemptible
    partition's GraceTime (what a preempted job gets between its signal and the kill)."""
    default = SiteProfile(name="defaults")  # the loader's own defaults, so the two never differ
    lead = default.signal_lead_s
    why = "the default: ranks checkpoint within it"
    if preemptible is not None and preemptible.grace_time_s > 0:
        lead = lead_within_grace(lead, preemptible.grace_time_s)
        why = (f"below GraceTime={preemptible.grace_time_s}s of preemptible partition "
               f"'{preemptible.name}': the checkpoint must be written before Slurm's kill")
    elif preemptible is not None:
        why = (f"partition '{preemptible.name}' has GraceTime=0: a preempted job is killed at "
               "once, only periodic checkpoints (save_steps) save its work")
    low, high = default.port_range
    grace = ["# grace_time_s: 60  # a preemptible partition's GraceTime (none found here): what "
             "a preempted job gets for its stop save"] if preemptible is None else [
        f"grace_time_s: {preemptible.grace_time_s}  # GraceTime of '{preemptible.name}': what a "
        "preempted job gets for its stop save; plan checks the predicted save against it"]
    return [
        "# Requeue: what a job does before a preemption or its time limit, and after a crash.",
        f"requeue_signal: {default.requeue_signal}  # sent before the kill: every rank "
        "checkpoints at the next step, then the job requeues (USR1, USR2 or TERM)",
        f"signal_lead_s: {lead}  # seconds before the time limit: {why}",
        *grace,
        f"max_requeues: {default.max_requeues}  # automatic retries after a crash (node "
        "failure, a killed task); a signalled stop does not count",
        f"port_range: [{low}, {high}]  # each job takes {PORTS_PER_JOB} ports here, picked by job id "
        "(rendezvous, vLLM server, weight sync): keep it clear of other services",
        f"watchdog_startup_s: {default.watchdog_startup_s}  # hang watchdog: the most an attempt "
        "may take to its first step (model load, engine start); raise it for slow loads",
        f"watchdog_min_s: {default.watchdog_min_s}  # hang watchdog: the least it waits for "
        "progress once steps are timed (3 x the slowest recent step when longer)",
    ]


def default_dir() -> Path:
    """Where ``--site NAME`` finds user profiles first ($HPC_GRPO_SITES, else ~/.config/...)."""
    return user_site_dirs()[0]


def target(name: str, output: str, force: bool) -> Path:
    """Where ``site init NAME`` writes, refused before anything is asked: a name that is no
    file name, a folder that cannot be made, or an existing file without ``force``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise UserError(f"'{name}' is not a usable profile name", field="name",
                        hint="letters, digits, '.', '_' and '-' only")
    path = Path(output).expanduser() if output else default_dir() / f"{name}.yaml"
    if where := folder_blocked(path.parent):  # mkdir's FileExistsError, after asking Slurm
        raise UserError(f"{path}: its folder {path.parent} {where}", field="output",
                        hint="give --output a file in a folder, new or existing")
    if path.is_dir():  # --force would end in os.replace's IsADirectoryError
        raise UserError(f"{path} is a folder, not a file", field="output",
                        hint=f"give --output a file, e.g. {path / (name + '.yaml')}")
    if path.exists() and not force:
        raise UserError(f"{path} already exists", field="output",
                        hint="use --force to replace it, or --output FILE")
    return path


def write_checked(path: Path, text: str) -> Path:
    """Write a generated profile only once the strict loader takes it: what lands on disk loads."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:  # a folder root may not write to (read-only, /proc): one line, not a traceback
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
    except OSError as exc:
        raise UserError(f"{path} cannot be written: {exc.strerror or exc}", field="output",
                        hint="give --output a file in a folder you can write") from None
    try:
        load_site(str(tmp), site_dirs([]))
    except UserError as err:
        tmp.unlink()
        raise UserError(f"internal error: the generated profile does not load: {err.message}") from err
    os.replace(tmp, path)
    return path


def header(name: str, flags: str = "") -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"Written by `hpc-grpo site init {name}{flags}` on {socket.gethostname()}, {stamp}."


def init_site(name: str, *, partition: str = "", output: str = "", force: bool = False) -> Path:
    """Ask Slurm, write the profile (never over an existing one unless ``force``), and prove it
    loads; returns its path."""
    path = target(name, output, force)
    parts = partitions_from(slurm.scontrol_show("partition"))
    chosen = choose_partition(parts, partition)
    nodes = nodes_from(slurm.scontrol_show("node"))
    text = profile_lines(chosen, nodes, parts, header(name), python=sys.executable,
                         measured=read_measurement(path.stem))
    return write_checked(path, text)


def summary(path: Path) -> dict[str, Any]:
    """The written profile as loaded, for the CLI's report (the links as plan will see them)."""
    site = load_site(str(path), site_dirs([]))
    facts = site_links(site)
    return {"path": str(path), "partition": site.partition, "cpus_per_node": site.cpus_per_node,
            "gpus_per_node": site.gpus_per_node, "max_time": site.max_time,
            "scheduler": site.scheduler, "gpu_type": site.gpu_type,
            "gpu_memory_gib": site.gpu_memory_gib, "cpu_memory_gib": site.cpu_memory_gib,
            "links": links_line(site, facts), "links_known": facts is not None}
