"""Where each rank lives: node-major ranks, TP groups of contiguous ranks, one vLLM seed per TP
group. The one rule for both sides: the planner prints these rows and refuses a layout TP
groups cannot tile, and every rank checks its own row and run.json's layout with the same
functions (moved out of rundir/contract.py, which holds the run record's fields).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class RankRow:
    """Where one rank lives; the launcher prints these rows and every rank checks its own."""

    node: int
    rank: int
    local_rank: int
    tp_group: int
    tp_rank: int
    vllm_seed: int
    dp_shard: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def tp_layout_problem(tp: int, procs_per_node: int) -> str:
    """Why TP groups of ``tp`` contiguous ranks cannot tile a node of ``procs_per_node`` ranks
    ("" when they can). The planner refuses such a layout and every rank checks run.json with
    the same rule."""
    if tp < 1:
        return f"tensor parallel size must be at least 1, got {tp}"
    if tp > procs_per_node:
        return f"tensor parallel size {tp} is larger than a node ({procs_per_node} processes)"
    if procs_per_node % tp:
        return f"tensor parallel size {tp} does not divide {procs_per_node} processes per node"
    return ""


def rank_row(rank: int, procs_per_node: int, tp: int) -> RankRow:
    """The one rule: node-major ranks (static torchrun rendezvous), TP groups of ``tp``
    contiguous ranks, and TRL's colocated engine seed ``rank // tp`` (one seed per TP group)."""
    return RankRow(node=rank // procs_per_node, rank=rank, local_rank=rank % procs_per_node,
                   tp_group=rank // tp, tp_rank=rank % tp, vllm_seed=rank // tp, dp_shard=rank)
