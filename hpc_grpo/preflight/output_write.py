"""What the plan knows of the output file system's write bandwidth: declared, measured, or neither.

One figure: GB/s (1e9 bytes) per node, every rank of the node writing its part of a checkpoint
at once (the slowest node's, where doctor measured several). ``site_write`` is the one place the
planner asks, in order (as ``links.site_links`` does for the links):

1. the profile's ``output_write_gbs``: the user's word, wins over a measurement;
2. doctor's measurement (``hpc-grpo doctor --site S --output-bandwidth``), cached per user, site
   and output root in ``<HPC_GRPO_HOME>/output_write/<site>.json`` (one entry per root: the same
   site may write to scratch and to a project space); a newer one replaces that root's;
3. nothing: None, and the planner assumes (planner/save_time.py says which figure and why).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.planner.types import WriteFigure
from hpc_grpo.rundir import read_json, write_json_atomic
from hpc_grpo.runs.registry import home_dir

CACHE_DIR = "output_write"
KIND = "output_write"  # the kind of report hpc_grpo.runtime.writebench prints
CACHE_VERSION = 1
DECLARED = "declared in the site profile (output_write_gbs)"


@dataclass(frozen=True)
class Measured:
    """doctor's cached measurement of one output root."""

    gbs_per_node: float
    total_gbs: float
    measured_at: str
    nodes: int
    procs_per_node: int
    bytes_per_rank: int

    @property
    def source(self) -> str:
        day = self.measured_at[:10] or "an unknown date"
        return (f"measured by doctor on {day} ({self.nodes} nodes x {self.procs_per_node} ranks "
                f"writing {self.bytes_per_rank / 2**30:.3g} GiB each, fsync'd)")


def root_key(root: str | os.PathLike[str]) -> str:
    """An output root as the cache keys it: expanded and absolute, as registry.output_root."""
    return str(Path(os.path.expandvars(str(root))).expanduser().resolve())


def cache_path(site_name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", site_name) or "_"
    return home_dir() / CACHE_DIR / f"{safe}.json"


def measured_from(report: Mapping[str, Any]) -> Measured | None:
    """writebench's report as a measurement; None for an error or a report without a figure."""
    gbs = report.get("gbs_per_node")
    if report.get("error") or not isinstance(gbs, int | float) or gbs <= 0:
        return None
    try:
        return Measured(float(gbs), float(report.get("total_gbs") or 0), str(report["measured_at"]),
                        int(report["nodes"]), int(report["procs_per_node"]),
                        int(report["bytes_per_rank"]))
    except (KeyError, TypeError, ValueError):
        return None


def _roots(site_name: str) -> dict[str, Any]:
    record = read_json(cache_path(site_name))
    if not isinstance(record, dict) or record.get("version") != CACHE_VERSION:
        return {}
    roots = record.get("roots")
    return roots if isinstance(roots, dict) else {}


def write_measurement(site_name: str, root: str, report: Mapping[str, Any]) -> Path | None:
    """Cache a measurement of ``root`` (atomically, replacing that root's older one); None when
    the report has no figure, which leaves an earlier measurement in place."""
    measured = measured_from(report)
    if measured is None:
        return None
    roots = _roots(site_name)
    roots[root_key(root)] = {**measured.__dict__, "report": dict(report)}
    path = cache_path(site_name)
    write_json_atomic(path, {"version": CACHE_VERSION, "site": site_name, "roots": roots})
    return path


def read_measurement(site_name: str, root: str) -> Measured | None:
    """The cached measurement of ``root``; None when there is none or it cannot be read."""
    entry = _roots(site_name).get(root_key(root))
    return measured_from({**entry, "error": None}) if isinstance(entry, dict) else None


def site_write(site: SiteProfile, root: str) -> WriteFigure | None:
    """The write bandwidth a plan of ``site`` writing to ``root`` uses: declared, else
    measured, else None (assumed)."""
    if site.output_write_gbs is not None:
        return WriteFigure(site.output_write_gbs, DECLARED, "declared")
    measured = read_measurement(site.name, root)
    return WriteFigure(measured.gbs_per_node, measured.source, "measured") if measured else None
