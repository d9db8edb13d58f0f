"""``hpc-grpo doctor --bandwidth``: time the links in a second short job and cache the figures.

Opt-in, because it is a job of another shape than the probe's: the node count doctor was given
and the site's processes per node (one per GPU, with the GPUs), where the probe takes one CPU
per node; on a busy cluster it queues again, and on GPU nodes NCCL's start alone takes seconds.
It runs ``hpc_grpo.runtime.linkbench`` through the same path as the probe (``slurm.run_on_nodes``,
the profile's modules, container and env), after the probe, and only where the probe's job ran
and found torch. The figures (all-reduce bus bandwidth between nodes and inside a node) are
cached per site for ``plan`` (``links.write_measurement``); a failed measurement keeps the older.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpc_grpo.config.site import SiteProfile, minutes
from hpc_grpo.preflight import links
from hpc_grpo.preflight.doctor import Row, Status, last_lines, srun_options
from hpc_grpo.runtime.probe_lines import read_reports
from hpc_grpo.scheduler import slurm
from hpc_grpo.scheduler.jobscript import node_command

MODULE = "hpc_grpo.runtime.linkbench"
CPU_SIZES_MIB = "4,16,64"  # Gloo over sockets: 64 MiB already takes tenths of a second
GPU_SIZES_MIB = "4,16,64,256"


def linkbench_args(site: SiteProfile, budget_s: float) -> list[str]:
    """linkbench's arguments for this site: sizes for its device, the site's port range and
    interface, the time bound."""
    low, high = site.port_range
    args = ["--sizes-mib", GPU_SIZES_MIB if site.gpus_per_node else CPU_SIZES_MIB,
            "--max-seconds", f"{budget_s:g}", "--port-low", str(low), "--port-high", str(high)]
    if site.network_interface:
        args += ["--interface", site.network_interface]
    return args + ([] if site.gpus_per_node else ["--device", "cpu"])


def _skip_reason(reports: Sequence[Mapping[str, Any]], nodes: int, procs: int) -> str:
    if nodes < 2 and procs < 2:
        return "one node x one process: no link to measure (use --nodes 2)"
    if not reports:
        return "not measured: the probe job did not run"
    if any(not r.get("versions", {}).get("torch") for r in reports):
        return "not measured: torch is not installed on every node"
    return ""


def figures(report: Mapping[str, Any]) -> str:
    """The measured figures in words, as the row shows them."""
    parts = []
    for key, where in (("inter", "between nodes"), ("intra", "inside a node")):
        block = report.get(key)
        if isinstance(block, Mapping) and block.get("gbs"):
            parts.append(f"{where} {float(block['gbs']):.3g} GB/s ({block.get('mib')} MiB)")
    ranks = report.get("procs_per_node", 1)
    return (", ".join(parts) + f"; {report.get('backend')}, {report.get('nodes')} nodes x "
            f"{ranks} processes, all-reduce bus bandwidth")


def judge(site: SiteProfile, report: Mapping[str, Any] | None, said: str) -> tuple[Status, str]:
    """(status, detail) of the bandwidth row for linkbench's report (None: none came back)."""
    if report is None:
        return "fail", f"no measurement came back: {said or 'srun said nothing'}"
    if report.get("error"):
        return "fail", f"the all-reduce failed: {report['error']}"
    measured = links.measured_from(report)
    if measured is None:
        return "fail", "the measurement gave no figure"
    path = links.write_measurement(site.name, report)
    facts = links.site_links(site, measured)
    note = facts.note if facts is not None else ""
    detail = f"{figures(report)}; cached for plan in {path}"
    return ("warn", f"{detail}; {note}") if note else ("pass", detail)


def measure(site: SiteProfile, reports: Sequence[Mapping[str, Any]], *, nodes: int,
            partition: str, python: str, timeout_s: float) -> tuple[Row, dict[str, Any] | None]:
    """Run linkbench on ``nodes`` nodes x the site's processes per node; the row and report."""
    procs = site.default_procs_per_node
    skip = _skip_reason(reports, nodes, procs)
    if skip:
        return Row("bandwidth", "skip", (), skip), None
    budget = max(5.0, min(30.0, timeout_s / 4))
    time_min = max(1, min(int(timeout_s // 60) + 1, minutes(site.max_time, "max_time")))
    step = slurm.run_on_nodes(
        node_command(site, python, linkbench_args(site, budget), module=MODULE),
        options=srun_options(site, nodes, partition or site.partition, time_min,
                             tasks_per_node=procs, job_name="hpc-grpo-links"),
        timeout_s=timeout_s, env=site.env,
    )
    found = [r for r in read_reports(step.stdout) if r.get("kind") == links.KIND]
    report = found[0] if found else None
    said = last_lines(step.stderr, 2)
    if step.timed_out:
        said = f"no answer within {timeout_s:g} s (queued or stuck); srun said: {said or 'nothing'}"
    status, detail = judge(site, report, said)
    hosts = tuple(str(h) for h in (report or {}).get("hosts", ()))
    return Row("bandwidth", status, hosts, detail), dict(report) if report else None
