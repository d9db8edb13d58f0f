"""``hpc-grpo doctor``: one short real job that checks what a training job will rely on.

srun starts ``hpc_grpo.runtime.probe`` once per node; each prints what it sees as JSON. The pure
functions here judge those reports (version ranges, known-bad combinations, names, ports, the
interface, the shared output directory, GPUs) and fold them into rows: one per check and outcome,
naming the nodes, so a bad node stands out from the good ones.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from hpc_grpo import __version__
from hpc_grpo.config.site import SiteProfile, minutes
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import bandwidth as measuring
from hpc_grpo.preflight import write_job
from hpc_grpo.preflight.capacity import Capacity, capacity_rows
from hpc_grpo.preflight.hardware_row import hardware_row
from hpc_grpo.preflight.local_site import fewer_gpus_line
from hpc_grpo.preflight.node_job import Row, Status, last_lines, runs_on, srun_options
from hpc_grpo.preflight.requeue_hold import hold_check
from hpc_grpo.preflight.siteinit import parse_records
from hpc_grpo.preflight.versions import satisfies
from hpc_grpo.rundir.contract import HardwareBlock
from hpc_grpo.runs import registry, terminal
from hpc_grpo.runtime.probe import PACKAGES
from hpc_grpo.runtime.probe_lines import read_reports
from hpc_grpo.scheduler import slurm
from hpc_grpo.scheduler.jobscript import (
    JobMemory,
    job_memory,
    node_command,
    pyxis_found,
)

# The tested stack (pyproject's runtime and vllm extras): specifier, and how to show it.
MATRIX: Mapping[str, tuple[str, str]] = {
    "torch": (">=2.6,<2.15", "2.6-2.14"),
    "trl": (">=1.16,<1.17", "1.16.x"),
    "vllm": (">=0.22,<0.32", "0.22-0.31"),
    "transformers": (">=4.56", ">= 4.56"),
    "deepspeed": (">=0.17", ">= 0.17"),
    "accelerate": (">=1.4", ">= 1.4"),
    "peft": (">=0.15", ">= 0.15"),
}
TRL_VLLM_FALLBACK = ">=0.22.0,<=0.31.0"  # TRL 1.16's vllm extra, when the node's TRL says nothing
CHECK_ORDER = ("job", *PACKAGES, "known: ZeRO-3 + LoRA", "known: vLLM vs TRL", "known: vLLM TP seeds",
               "same stack", "hpc-grpo", "modules", "container runtime", "container", "node names",
               "scontrol", "requeue hold", "interface", "rendezvous port", "shared output", "output disk",
               "node memory", "gpus", "partition gpus", "plan hardware", "bandwidth", "output bandwidth")


@dataclass(frozen=True)
class Expect:
    """What the profile promises, to compare each node against."""

    gpus_per_node: int
    interface: str
    modules: tuple[str, ...] = ()
    container: str = ""  # the profile's container runtime, "" for none
    capacity: Capacity = Capacity()  # disk and memory a planned job needs (doctor --model)
    gpu_memory_gib: float = 0.0  # the profile's, compared as the ranks compare it (hardware_row)
    job_memory: JobMemory | None = None  # what Slurm gives the training job per node (None: unread)


# ---- versions ------------------------------------------------------------------------------

def judge_package(name: str, version: str | None, *, gpu_site: bool) -> tuple[Status, str]:
    """One package against the supported matrix."""
    spec, shown = MATRIX[name]
    if version is None:
        if name == "vllm" and not gpu_site:
            return "pass", "absent (CPU site: generation through transformers)"
        why = " (colocated generation needs it)" if name == "vllm" else ""
        return "fail", f"not installed; supported {shown}{why}"
    try:
        ok = satisfies(version, spec)
    except ValueError:
        return "fail", f"{version}: not a version this check can read; supported {shown}"
    if name == "vllm" and not gpu_site:
        return ("pass" if ok else "warn"), f"{version} (unused on a CPU site; supported {shown})"
    return ("pass" if ok else "fail"), f"{version} ({'' if ok else 'outside '}supported {shown})"


def _within(version: str | None, spec: str) -> bool | None:
    """satisfies(), or None where either side is missing or unreadable."""
    try:
        return satisfies(version, spec) if version and spec else None
    except ValueError:
        return None


def known_bad(versions: Mapping[str, str | None], trl_vllm: str) -> list[tuple[str, Status, str]]:
    """Combinations known to fail at run time, even where each version is in range."""
    rows: list[tuple[str, Status, str]] = []
    deepspeed, vllm, trl = versions.get("deepspeed"), versions.get("vllm"), versions.get("trl")
    old_deepspeed = _within(deepspeed, "<=0.19.2")
    if old_deepspeed:
        rows.append(("known: ZeRO-3 + LoRA", "warn",
                     f"deepspeed {deepspeed} <= 0.19.2: LoRA with modules_to_save under ZeRO-3 "
                     "fails with ds_grads_remaining; upgrade deepspeed or drop modules_to_save"))
    elif old_deepspeed is False:
        rows.append(("known: ZeRO-3 + LoRA", "pass",
                     f"deepspeed {deepspeed} > 0.19.2 (ds_grads_remaining is known up to 0.19.2)"))
    if _within(vllm, ">=0") is None:
        return rows  # no vLLM (or an unreadable version, which the matrix row reports)
    spec = trl_vllm if _within("0", trl_vllm) is not None else TRL_VLLM_FALLBACK
    ok = _within(vllm, spec)
    rows.append(("known: vLLM vs TRL", "pass" if ok else "fail",
                 f"vllm {vllm} {'within' if ok else 'outside'} the range trl {trl or '?'} "
                 f"declares ({spec})"))
    if _within(vllm, "<0.8.3"):
        rows.append(("known: vLLM TP seeds", "warn",
                     f"vllm {vllm} < 0.8.3: colocated TP engines (external_launcher) sample "
                     "differently per rank unless every engine gets its group's seed"))
    return rows


# ---- one node's report -> (check, status, detail) ------------------------------------------

def _fact(report: Mapping[str, Any], key: str) -> tuple[bool, str] | None:
    fact = report.get(key)
    return None if fact is None else (bool(fact.get("ok")), str(fact.get("detail", "")))


def _resolve_row(report: Mapping[str, Any]) -> tuple[Status, str]:
    results: Mapping[str, Any] = report.get("resolve", {})
    if "detail" in results:  # the probe could not even try
        return "fail", str(results["detail"])
    failed = [f"{name} ({r.get('detail')})" for name, r in results.items() if not r.get("ok")]
    if failed:
        return "fail", "does not resolve: " + ", ".join(failed)
    loop = [f"{name} -> {r['detail']}" for name, r in results.items()
            if str(r.get("detail", "")).startswith(("127.", "::1"))]
    if loop:
        return "warn", ("resolves to loopback: " + ", ".join(loop)
                        + "; set network_interface so Gloo/NCCL do not bind to it")
    return "pass", f"all {len(results)} node name(s) of the allocation resolve"


def _setup_rows(report: Mapping[str, Any], expect: Expect) -> list[tuple[str, Status, str]]:
    """The profile's modules and container, as the node command met them."""
    rows: list[tuple[str, Status, str]] = []
    for check, key, wanted in (("modules", "modules", bool(expect.modules)),
                               ("container", "container", bool(expect.container))):
        fact = _fact(report, key)
        if fact is not None:
            rows.append((check, "pass" if fact[0] else "fail", fact[1]))
        elif wanted:
            rows.append((check, "fail", "the node did not report it (an older hpc-grpo there?)"))
    return rows


def node_checks(report: Mapping[str, Any], expect: Expect) -> list[tuple[str, Status, str]]:
    """Every check one node's report answers, in table order."""
    rows: list[tuple[str, Status, str]] = []
    versions: Mapping[str, str | None] = report.get("versions", {})
    gpu_site = expect.gpus_per_node > 0
    for name in PACKAGES:
        rows.append((name, *judge_package(name, versions.get(name), gpu_site=gpu_site)))
    rows += known_bad(versions, str(report.get("trl_vllm_requirement", "")))
    theirs = report.get("hpc_grpo") or "not importable"
    rows.append(("hpc-grpo", "pass" if theirs == __version__ else "warn",
                 f"{theirs} on the node, {__version__} here; python {report.get('python', '?')}"))
    rows.append(("node names", *_resolve_row(report)))
    rows += _setup_rows(report, expect)
    scontrol = _fact(report, "scontrol")
    if scontrol is not None:
        ok, detail = scontrol
        where = f" inside the {expect.container} container" if expect.container else ""
        fix = ("; mount Slurm's binaries, libraries and config (and munge's socket) into the image"
               if where else "")
        rows.append(("scontrol", "pass" if ok else "fail",
                     f"{detail}{where}" + (fix if not ok else
                                           " (submitit's requeue and the rendezvous use it)")))
    interface = _fact(report, "interface")
    if not expect.interface:
        rows.append(("interface", "skip", "network_interface not set: NCCL and Gloo pick one"))
    elif interface is None:
        rows.append(("interface", "fail", f"{expect.interface}: the node did not report it"))
    else:
        ok, detail = interface
        rows.append(("interface", "pass" if ok else "fail", f"{expect.interface}: {detail}"))
    for check, key in (("rendezvous port", "port"), ("shared output", "share_write"),
                       ("shared output", "share_read")):
        fact = _fact(report, key)
        if fact is not None:
            rows.append((check, "pass" if fact[0] else "fail", fact[1]))
    gpus = report.get("gpus", {})
    count, source = int(gpus.get("count", 0)), str(gpus.get("source") or gpus.get("detail", "?"))
    want = expect.gpus_per_node
    status: Status = "pass" if count == want else ("warn" if count > want else "fail")
    rows.append(("gpus", status, f"{count} seen ({source}), profile says {want}"))
    planned = HardwareBlock(expect.gpus_per_node, expect.gpu_memory_gib,
                            expect.capacity.cpu_memory_gib)
    return rows + capacity_rows(report, expect.capacity, expect.job_memory) + [
        hardware_row(report, planned, expect.job_memory)]


# ---- all nodes -> rows -----------------------------------------------------------------------

def parse_reports(stdout: str) -> list[dict[str, Any]]:
    """The probe's reports out of srun's merged stdout, one per node (first wins)."""
    reports: dict[str, dict[str, Any]] = {}
    for report in read_reports(stdout):
        reports.setdefault(str(report.get("node")), report)
    return sorted(reports.values(), key=lambda r: int(r.get("node_id", 0)))


def aggregate(reports: Sequence[Mapping[str, Any]], expect: Expect, job_note: str = "") -> list[Row]:
    """Group identical outcomes of a check across nodes into one row naming those nodes."""
    if not reports:
        return [Row("job", "fail", (), job_note or "no node reported")]
    expected = list(reports[0].get("hosts", []))
    seen = [str(r.get("node")) for r in reports]
    missing = [name for name in expected if name not in seen]
    if missing:
        detail = f"no report from {len(missing)} of {len(expected)} node(s)"
        rows = [Row("job", "fail", tuple(missing), detail + (f": {job_note}" if job_note else ""))]
    else:
        rows = [Row("job", "pass", tuple(seen), f"job {reports[0].get('job_id')}: every node reported")]
    grouped: dict[tuple[str, Status, str], list[str]] = {}
    for report in reports:
        for check, status, detail in node_checks(report, expect):
            grouped.setdefault((check, status, detail), []).append(str(report.get("node")))
    rows += [Row(check, status, tuple(nodes), detail)
             for (check, status, detail), nodes in grouped.items()]
    stacks = {json.dumps(r.get("versions", {}), sort_keys=True) for r in reports}
    rows.append(Row("same stack", "pass" if len(stacks) == 1 else "warn", tuple(seen),
                    "identical package versions on every node" if len(stacks) == 1
                    else f"{len(stacks)} different package sets: ranks would run different code"))
    return sorted_rows(rows)


def sorted_rows(rows: Sequence[Row]) -> list[Row]:
    order = {check: i for i, check in enumerate(CHECK_ORDER)}
    return sorted(rows, key=lambda row: order.get(row.check, len(order)))


def exit_code(rows: Sequence[Row]) -> int:
    return 1 if any(row.status == "fail" for row in rows) else 0


# ---- the job ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    site: str
    rows: tuple[Row, ...]
    reports: tuple[dict[str, Any], ...]
    links: dict[str, Any] | None = None  # the link measurement's report (--bandwidth)
    output_write: dict[str, Any] | None = None  # the write measurement's (--output-bandwidth)

    @property
    def exit_code(self) -> int:
        return exit_code(self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "exit_code": self.exit_code,
                "rows": [asdict(row) for row in self.rows], "reports": list(self.reports),
                "links": self.links, "output_write": self.output_write}


def run(site: SiteProfile, *, nodes: int, partition: str = "", output_root: str = "",
        python: str = "", timeout_s: float = 180, share_wait_s: float = 20,
        capacity: Capacity | None = None, bandwidth: bool = False,
        output_bandwidth: bool = False, bytes_per_rank: int = 0) -> Result:
    """Submit the probe job, wait for it (at most ``timeout_s``) and judge what came back; with
    ``bandwidth``, then time the links in a second short job (preflight/bandwidth.py); with
    ``output_bandwidth``, the output root's writes (preflight/write_job.py: ``bytes_per_rank``
    each, 0 for its fixed size)."""
    if not runs_on(site):
        raise UserError(f"site '{site.name}' has no Slurm: doctor checks cluster nodes",
                        field="site", hint="pick a Slurm site: `hpc-grpo sites` lists them")
    if site.max_nodes and nodes > site.max_nodes:
        raise UserError(f"{nodes} nodes requested but site '{site.name}' has {site.max_nodes}",
                        field="nodes", hint=f"use --nodes {site.max_nodes} or fewer")
    partition = partition or site.partition
    slurm.require_partition_nodes(partition, nodes)  # srun would wait forever, not refuse
    root = registry.output_root(output_root or None, site.output_root)  # not under a file
    low, high = site.port_range
    args = ["--port-low", str(low), "--port-high", str(high), "--share-dir", str(root),
            "--token", secrets.token_hex(8), "--share-wait", f"{share_wait_s:g}",
            "--gpus", str(site.gpus_per_node)]
    if site.network_interface:
        args += ["--interface", site.network_interface]
    time_min = max(1, min(int(timeout_s // 60) + 1, minutes(site.max_time, "max_time")))
    fewer = fewer_gpus_line(dataclasses.replace(site, partition=partition),
                            slurm.partition_gres(partition) or ())  # () where sinfo is silent
    pre: list[Row] = [Row("partition gpus", "warn", (), fewer)] if fewer else []
    if site.container is not None and site.container.runtime == "pyxis":
        found, detail = pyxis_found(slurm.srun_help())
        pre.append(Row("container runtime", found, (), detail))
        if pre[-1].status == "fail":
            site = dataclasses.replace(site, container=None)
    step = slurm.run_on_nodes(
        node_command(site, python or site.python or sys.executable, args),
        options=srun_options(site, nodes, partition, time_min),
        timeout_s=timeout_s, env=site.env,
    )
    reports = parse_reports(step.stdout)
    said = last_lines(step.stderr, 3)
    if not reports and not step.timed_out and "allocate" in step.stderr.lower():
        raise UserError(f"srun refused the job: {said}",
                        hint="check --nodes and --partition against sinfo, and the profile's "
                             "account, qos and GPU settings")
    if step.timed_out:
        note = f"no answer within {timeout_s:g} s (queued or stuck); srun said: {said or 'nothing'}"
    else:
        note = f"srun exit code {step.returncode}" + (f": {said}" if said else "")
    box = site.container.runtime if site.container is not None else ""
    want = capacity or Capacity(cpu_memory_gib=site.cpu_memory_gib)
    config = _scontrol("config")
    rows = aggregate(reports, Expect(site.gpus_per_node, site.network_interface, site.modules, box,
                                     want, site.gpu_memory_gib, _job_memory(site, partition, config)),
                     job_note=note if (step.timed_out or step.returncode or not reports) else "")
    rows.append(_requeue_hold_row(config))
    links: dict[str, Any] | None = None
    if bandwidth:
        row, links = measuring.measure(site, reports, nodes=nodes, partition=partition,
                                       python=python or site.python or sys.executable,
                                       timeout_s=timeout_s)
        rows.append(row)
    written: dict[str, Any] | None = None
    if output_bandwidth:
        row, written = write_job.measure(site, reports, nodes=nodes, partition=partition,
                                         python=python or site.python or sys.executable,
                                         timeout_s=timeout_s, root=str(root),
                                         bytes_per_rank=bytes_per_rank)
        rows.append(row)
    return Result(site.name, tuple(sorted_rows([*pre, *rows])), tuple(reports), links, written)


def _scontrol(entity: Literal["partition", "config"]) -> str | None:
    """``scontrol show`` ENTITY's text, None where it does not answer."""
    try:
        return slurm.scontrol_show(entity)
    except UserError:
        return None


def _job_memory(site: SiteProfile, partition: str, config: str | None) -> JobMemory | None:
    """What Slurm gives the training job per node (scheduler/jobscript.py job_memory), from the
    partition's and the controller's settings; None where either cannot be read."""
    partitions = _scontrol("partition")
    if config is None or partitions is None:
        return None
    settings = {k.strip(): v.strip() for k, sep, v in
                (line.partition("=") for line in config.splitlines()) if sep}
    record = next((r for r in parse_records(partitions) if r.get("PartitionName") == partition
                   or (not partition and r.get("Default") == "YES")), {})
    return job_memory(site, partition or record.get("PartitionName", ""), record, settings)


def _requeue_hold_row(text: str | None) -> Row:
    """How long Slurm holds a requeued job (preflight/requeue_hold.py), from the controller."""
    status, detail = hold_check(text)
    return Row("requeue hold", status, (), detail)


# ---- output --------------------------------------------------------------------------------

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _nodes_text(nodes: Sequence[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 6 else f"{', '.join(nodes[:5])}, ... ({len(nodes)})"


def print_table(result: Result) -> None:
    from rich.markup import escape  # start-up: rich loads only to draw (--json never does)
    from rich.table import Table

    table = Table(box=None, header_style="bold", title=f"hpc-grpo doctor: site {escape(result.site)}",
                  title_justify="left")
    for column in ("check", "result", "nodes", "detail"):
        table.add_column(column, overflow="fold")
    for row in result.rows:
        table.add_row(escape(row.check), f"[{_STYLE[row.status]}]{row.status.upper()}[/]",
                      escape(_nodes_text(row.nodes)), escape(row.detail))
    counts = {s: sum(r.status == s for r in result.rows) for s in ("pass", "warn", "fail")}
    console = terminal.console()
    console.print(table)
    console.print(f"{counts['pass']} passed, {counts['warn']} warning(s), {counts['fail']} failed")
