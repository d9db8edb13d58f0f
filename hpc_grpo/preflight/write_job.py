"""``hpc-grpo doctor --output-bandwidth``: time the output file system as a save would use it.

A second short job, like ``--bandwidth``'s (preflight/bandwidth.py) and for the same reason
opt-in: it takes the site's processes per node, and it writes real bytes (by default 1 GiB a
rank; with ``--model``, each rank's share of the planned checkpoint). It runs
``hpc_grpo.runtime.writebench`` through the probe's path (``slurm.run_on_nodes``, the profile's
modules, container and env), after the probe, and only where the probe's job ran. The figure
(GB/s per node, the slowest node's, every rank of the node writing at once, fsync'd) is cached
per site and output root for ``plan`` (``output_write.write_measurement``); a failed
measurement keeps the older one.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from hpc_grpo.config.site import SiteProfile, minutes
from hpc_grpo.planner.checkpoint_size import gib
from hpc_grpo.preflight import output_write
from hpc_grpo.preflight.node_job import Row, Status, last_lines, srun_options
from hpc_grpo.runtime.probe_lines import read_reports
from hpc_grpo.scheduler import slurm
from hpc_grpo.scheduler.jobscript import node_command

MODULE = "hpc_grpo.runtime.writebench"
CHECK = "output bandwidth"
DEFAULT_BYTES_PER_RANK = 2**30


def writebench_args(root: str, bytes_per_rank: int, budget_s: float, token: str = "") -> list[str]:
    return ["--dir", root, "--token", token or secrets.token_hex(8),
            "--bytes-per-rank", str(bytes_per_rank), "--max-seconds", f"{budget_s:g}"]


def space_text(space: Mapping[str, Any]) -> str:
    """The free space and quota in words, saying which tool told it."""
    text = f"{gib(int(space.get('df_free_bytes') or 0))} free (df, {space.get('fs_type') or '?'})"
    quota = space.get("quota")
    if isinstance(quota, Mapping):
        text += (f"; quota {gib(quota['limit_bytes'])}, {gib(quota['free_bytes'])} left "
                 f"({space.get('source')})")
    elif space.get("fs_type") in ("lustre", "gpfs"):
        text += "; no quota read (lfs quota / mmlsquota absent or no limit set)"
    return text


def figures(report: Mapping[str, Any]) -> str:
    per_node = report.get("per_node") or {}
    slow = " (cut short at the time bound: a lower bound)" if report.get("cut_short") else ""
    return (f"{float(report['gbs_per_node']):.3g} GB/s a node (the slowest of {len(per_node)}), "
            f"{float(report.get('total_gbs') or 0):.3g} GB/s in total{slow}; "
            f"{report.get('nodes')} nodes x {report.get('procs_per_node')} ranks writing "
            f"{int(report.get('bytes_per_rank') or 0) / 2**30:.3g} GiB each at once, fsync'd, "
            f"removed; {space_text(report.get('space') or {})}")


def judge(site: SiteProfile, root: str, report: Mapping[str, Any] | None,
          said: str) -> tuple[Status, str]:
    """(status, detail) of the row for writebench's report (None: none came back)."""
    if report is None:
        return "fail", f"no measurement came back: {said or 'srun said nothing'}"
    if report.get("error"):
        return "fail", f"the write failed: {report['error']}"
    path = output_write.write_measurement(site.name, root, report)
    if path is None:
        return "fail", "the measurement gave no figure"
    detail = f"{figures(report)}; cached for plan in {path}"
    if site.output_write_gbs is not None:
        return "pass", f"{detail}; plan uses the profile's output_write_gbs {site.output_write_gbs:g}"
    return "pass", detail


def measure(site: SiteProfile, reports: Sequence[Mapping[str, Any]], *, nodes: int,
            partition: str, python: str, timeout_s: float, root: str,
            bytes_per_rank: int = 0) -> tuple[Row, dict[str, Any] | None]:
    """Run writebench on ``nodes`` nodes x the site's processes per node; the row and report."""
    if not reports:
        return Row(CHECK, "skip", (), "not measured: the probe job did not run"), None
    procs = site.default_procs_per_node
    budget = max(10.0, timeout_s / 2)
    time_min = max(1, min(int(timeout_s // 60) + 2, minutes(site.max_time, "max_time")))
    args = writebench_args(root, bytes_per_rank or DEFAULT_BYTES_PER_RANK, budget)
    step = slurm.run_on_nodes(
        node_command(site, python, args, module=MODULE),
        options=srun_options(site, nodes, partition or site.partition, time_min,
                             tasks_per_node=procs, job_name="hpc-grpo-write"),
        timeout_s=timeout_s + 60, env=site.env,
    )
    found = [r for r in read_reports(step.stdout) if r.get("kind") == output_write.KIND]
    report = found[0] if found else None
    said = last_lines(step.stderr, 2)
    if step.timed_out:
        said = f"no answer within {timeout_s + 60:g} s (queued or stuck); srun said: {said or 'nothing'}"
    status, detail = judge(site, root, report, said)
    hosts = tuple(str(h) for h in (report or {}).get("hosts", ()))
    return Row(CHECK, status, hosts, detail), dict(report) if report else None
