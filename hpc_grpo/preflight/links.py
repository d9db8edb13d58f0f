"""What the plan knows of a site's links: declared in the profile, measured by doctor, or neither.

Two figures, each the bus bandwidth of an all-reduce in GB/s (1e9 bytes; nccl-tests' busbw):
between nodes (one rank per node) and inside a node (the ranks of one node). ``site_links`` is
the one place the planner asks; per figure, in order:

1. the profile's ``inter_node_gbs`` / ``intra_node_gbs``: the user's word, e.g. 25 on an
   InfiniBand cluster whose NCCL path doctor's short job may not reach; it wins over a
   measurement, and where a measurement disagrees by more than ``DISAGREE`` times either way
   the facts carry a note that ``plan`` prints (the user should check one or the other);
2. doctor's measurement (``hpc-grpo doctor --site S --bandwidth``), cached per user and site in
   ``<HPC_GRPO_HOME>/links/<site>.json``; a newer one replaces it;
3. nothing: ``site_links`` returns None and the planner assumes (``assumed_line`` says so).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.planner.types import LinkFigures
from hpc_grpo.preflight.node_job import runs_on
from hpc_grpo.runs.registry import home_dir

CACHE_DIR = "links"
KIND = "links"  # the kind of report hpc_grpo.runtime.linkbench prints
CACHE_VERSION = 1
DISAGREE = 2.0  # declared vs measured: a factor beyond which plan shows both
DECLARED = "declared in the site profile"


@dataclass(frozen=True)
class LinkFacts:
    """The links a plan may use: GB/s (None: unknown) and where they came from, in words."""

    intra_node_gbs: float | None
    inter_node_gbs: float | None
    source: str  # e.g. "measured by doctor on 2026-11-26 (gloo, 2 nodes x 2 processes)"
    measured_at: str  # ISO time of the measurement used, "" when every figure is declared
    note: str = ""  # a declared figure a measurement disagrees with, for plan to print

    def for_plan(self) -> LinkFigures:
        """The planner's value of these figures (planner/types.LinkFigures)."""
        return LinkFigures(self.intra_node_gbs, self.inter_node_gbs, self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"intra_node_gbs": self.intra_node_gbs, "inter_node_gbs": self.inter_node_gbs,
                "source": self.source, "measured_at": self.measured_at, "note": self.note}


@dataclass(frozen=True)
class Measured:
    """doctor's cached measurement of one site."""

    inter_node_gbs: float | None
    intra_node_gbs: float | None
    measured_at: str
    backend: str
    nodes: int
    procs_per_node: int

    @property
    def source(self) -> str:
        day = self.measured_at[:10] or "an unknown date"
        ranks = f" x {self.procs_per_node} processes" if self.procs_per_node > 1 else ""
        return f"measured by doctor on {day} ({self.backend}, {self.nodes} nodes{ranks})"


def cache_path(site_name: str) -> Path:
    """Where doctor keeps a site's measurement: the per-user state folder (the run index's)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", site_name) or "_"
    return home_dir() / CACHE_DIR / f"{safe}.json"


def _gbs(block: Any) -> float | None:
    value = block.get("gbs") if isinstance(block, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def measured_from(report: Mapping[str, Any]) -> Measured | None:
    """linkbench's report as a measurement; None for an error report or one without a figure."""
    if report.get("error"):
        return None
    inter, intra = _gbs(report.get("inter")), _gbs(report.get("intra"))
    if inter is None and intra is None:
        return None
    return Measured(inter, intra, str(report.get("measured_at", "")), str(report.get("backend", "?")),
                    int(report.get("nodes", 0) or 0), int(report.get("procs_per_node", 0) or 0))


def write_measurement(site_name: str, report: Mapping[str, Any]) -> Path | None:
    """Cache a measurement (atomically, replacing the older one); None when the report has no
    figure, which leaves an earlier measurement in place."""
    measured = measured_from(report)
    if measured is None:
        return None
    path = cache_path(site_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"version": CACHE_VERSION, "site": site_name, **measured.__dict__,
              "report": dict(report)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_measurement(site_name: str) -> Measured | None:
    """The cached measurement; None when there is none or it cannot be read (a damaged cache
    is the same as none: the plan then assumes, and says so)."""
    try:
        record = json.loads(cache_path(site_name).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("version") != CACHE_VERSION:
        return None
    def gbs(key: str) -> float | None:
        value = record.get(key)
        return float(value) if isinstance(value, int | float) and value > 0 else None

    try:
        return Measured(gbs("inter_node_gbs"), gbs("intra_node_gbs"), str(record["measured_at"]),
                        str(record["backend"]), int(record["nodes"]), int(record["procs_per_node"]))
    except (KeyError, TypeError, ValueError):
        return None


def _disagreement(what: str, declared: float | None, measured: float | None,
                  source: str) -> str:
    if declared is None or measured is None:
        return ""
    ratio = declared / measured
    if 1 / DISAGREE <= ratio <= DISAGREE:
        return ""
    return (f"{what} {declared:g} GB/s declared in the profile, but {source[0].lower()}"
            f"{source[1:]} gave {measured:.3g} GB/s ({max(ratio, 1 / ratio):.1f}x "
            f"{'less' if ratio > 1 else 'more'}); the plan uses the declared figure: check the "
            "network the job uses (network_interface, NCCL_* in env), or correct the profile")


def site_links(site: SiteProfile, measured: Measured | None = None) -> LinkFacts | None:
    """The links a plan of ``site`` uses: each figure declared, else measured (``measured`` or
    the cache), else None; None when neither figure is known (the planner assumes them).
    A Gloo measurement on a GPU site is not used: the nodes' torch had no CUDA then, and Gloo's
    sockets say nothing of what NCCL gets from the same fabric."""
    measured = measured or read_measurement(site.name)
    if measured is not None and site.device == "cuda" and measured.backend == "gloo":
        measured = None
    picked: dict[str, tuple[float | None, str]] = {}
    for key in ("inter_node_gbs", "intra_node_gbs"):
        declared = getattr(site, key)
        from_doctor = getattr(measured, key) if measured is not None else None
        if declared is not None:
            picked[key] = (declared, DECLARED)
        elif from_doctor is not None and measured is not None:
            picked[key] = (from_doctor, measured.source)
        else:
            picked[key] = (None, "")
    if all(value is None for value, _ in picked.values()):
        return None
    sources = [s for s in dict.fromkeys(s for _, s in picked.values()) if s]
    if len(sources) > 1:
        source = "; ".join(f"{'between nodes' if key.startswith('inter') else 'inside a node'} {s}"
                           for key, (_, s) in picked.items() if s)
    else:
        source = sources[0]
    used = measured is not None and any(s == measured.source for _, s in picked.values())
    notes = [_disagreement(where, getattr(site, key), getattr(measured, key), measured.source)
             for key, where in (("inter_node_gbs", "between nodes:"),
                                ("intra_node_gbs", "inside a node:"))
             if measured is not None]
    return LinkFacts(picked["intra_node_gbs"][0], picked["inter_node_gbs"][0], source,
                     measured.measured_at if used and measured is not None else "",
                     "; ".join(n for n in notes if n))


def _figure(value: float | None) -> str:
    return f"{value:.3g} GB/s" if value is not None else "unknown"


def links_line(site: SiteProfile, facts: LinkFacts | None) -> str:
    """One line for plan's report: the figures and where they come from, or that they are
    assumed and how to measure them."""
    measure = f"`hpc-grpo doctor --site {site.name} --bandwidth` measures them"
    if not runs_on(site):
        measure = "doctor measures Slurm sites only; declare intra_node_gbs in the profile"
    if facts is None:
        return (f"links: assumed (neither declared in the profile nor measured): {measure}, "
                "or declare inter_node_gbs / intra_node_gbs")
    known = f"links: between nodes {_figure(facts.inter_node_gbs)}, inside a node " \
            f"{_figure(facts.intra_node_gbs)} (all-reduce bus bandwidth), {facts.source}"
    if facts.inter_node_gbs is None or facts.intra_node_gbs is None:
        known += f"; the unknown one is assumed ({measure})"
    return known


def plan_links(site: SiteProfile) -> dict[str, Any]:
    """plan's ``links`` block: the facts (None when assumed), the line, and any disagreement."""
    facts = site_links(site)
    return {"facts": facts.to_dict() if facts else None, "line": links_line(site, facts),
            "note": facts.note if facts else ""}

