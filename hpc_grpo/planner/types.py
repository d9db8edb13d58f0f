"""The planner's shared types: the model it plans for (ModelRef) and the link figures the
launcher found (LinkFigures). Plain frozen values; what the memory plan is asked (PlanRequest)
is memory/request.py's, what it answers (MemoryPlan) memory_plan.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hpc_grpo.planner.memory.arch import ModelArch


@dataclass(frozen=True)
class ModelRef:
    """The model as the ranks will load it, and its architecture when known."""

    source: str  # absolute local folder or hub id
    local: bool
    arch: ModelArch | None
    commit: str = ""  # a hub id staged in the site's hf_home: the pinned commit
    hf_home: str = ""  # the site's shared Hugging Face cache, expanded on the login node
    context: int = 0  # max_position_embeddings where known without the arch (a built-in model)


@dataclass(frozen=True)
class LinkFigures:
    """The link bandwidths a plan uses (GB/s, an all-reduce's bus bandwidth), found by the
    launcher (the profile's declared figures, else doctor's cached measurement:
    preflight/links.py); None for a figure that is assumed (planner/speed/hardware_figures.py)."""

    intra_node_gbs: float | None = None
    inter_node_gbs: float | None = None
    source: str = ""


@dataclass(frozen=True)
class WriteFigure:
    """The output file system's write bandwidth a plan uses: GB/s (1e9 bytes) per node, every
    rank of the node writing at once, as the launcher found it (the profile's
    ``output_write_gbs``, else doctor's cached measurement of the output root:
    preflight/output_write.py), where it came from in words, and which of the two it is (run.json
    and ``status`` say it in one word). None where neither is known: the plan assumes
    (planner/save_time.py)."""

    gbs_per_node: float
    source: str
    kind: Literal["declared", "measured"]
