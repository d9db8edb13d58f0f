"""The verdicts on one save's predicted time (save_time.py): a stop's save that cannot finish
within the signal lead or a preemption's GraceTime, with the smallest change that makes it fit,
and periodic saves that hold training long enough to name ``async_save``. Pure, like the rest
of the plan; what submit refuses is the ``problem`` these return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpc_grpo.planner.checkpoint_size import CheckpointSize
from hpc_grpo.planner.timing import MARGIN_S, SAVE_MARGIN
from hpc_grpo.planner.types import WriteFigure
from hpc_grpo.rundir.contract import CHECKPOINT_HOST_FRACTION

MAX_LEAD_S = 65535  # sbatch's --signal range, and the profile's
SUGGEST_ASYNC_FRACTION = 0.05  # periodic saves above this share of training: async_save named


@dataclass(frozen=True)
class SaveRequest:
    size: CheckpointSize
    world_size: int
    procs_per_node: int
    write: WriteFigure | None  # None: assumed
    step_s: float  # 0: unknown (no prediction, nothing measured)
    step_source: str  # "predicted", "measured by RUN"
    lead_s: int  # the plan's signal lead
    time_limit_s: int
    max_time_s: int  # the site's max_time
    grace_s: int | None  # the profile's grace_time_s
    save_steps: int | None  # None: no periodic saves (save_strategy no or epoch)
    site_name: str = ""
    async_save: bool = False  # periodic saves written in the background
    node_memory_gib: float = 0.0  # the profile's memory a job may use a node; 0: unknown


def periodic_warnings(req: SaveRequest, node_bytes: int, seconds: float) -> list[str]:
    """Periodic saves that hold training long enough to name async_save (at a declared or
    measured bandwidth), and an async_save whose node share would not fit the writer's room in
    host memory."""
    if req.async_save:
        room = CHECKPOINT_HOST_FRACTION * req.node_memory_gib * 2**30
        if req.node_memory_gib and node_bytes > room:
            return [f"save time: async_save holds a node's {node_bytes / 2**30:.1f} GiB in host "
                    f"memory until written, past half of the node's {req.node_memory_gib:g} GiB: "
                    "the files past it are written at once, holding training as without it"]
        return []
    if not req.save_steps or req.step_s <= 0 or req.write is None:
        return []  # an assumed bandwidth names nothing (every plan of an unmeasured site would)
    fraction = seconds / (req.save_steps * req.step_s)
    if fraction <= SUGGEST_ASYNC_FRACTION:
        return []
    return [f"save time: periodic saves hold training {100 * fraction:.1f}% of the time "
            f"({seconds:.1f} s every {req.save_steps} steps): --set async_save=true writes them "
            "in the background (each rank holds its share in host memory until written), or a "
            "larger save_steps"]


def fitting_bytes(within_s: float, step_s: float, gbs: float) -> int:
    """The most bytes a node may write for a stop to finish within ``within_s`` (0: none)."""
    return max(0, int((within_s - step_s - MARGIN_S) / SAVE_MARGIN * gbs * 1e9))


def _fewer(req: SaveRequest, within_s: float, gbs: float, node_bytes: int) -> str:
    most = fitting_bytes(within_s, req.step_s, gbs)
    if not most:
        return (f"fewer bytes cannot help: the step in flight and the {MARGIN_S} s margin alone "
                f"take {within_s:g} s or more")
    return (f"fewer bytes: at most {most / 1e9:.1f} GB on the busiest node, now "
            f"{node_bytes / 1e9:.1f} (LoRA, fewer trainable parameters), or a faster output "
            "file system (--output-root)")


def verdicts(req: SaveRequest, gbs: float, node_bytes: int, needed: int) -> tuple[str, list[str]]:
    """(why submit refuses, warnings): a stop save that cannot finish in the lead or GraceTime.
    Refused only where it can never fit the partition's limits and the bandwidth is known; not
    judged without a step time (a CPU site's plan predicts none, and nothing was measured yet)."""
    if req.step_s <= 0:
        return "", []
    guess = "" if req.write else (
        f"; the bandwidth is assumed: `hpc-grpo doctor --site {req.site_name or 'SITE'} "
        "--output-bandwidth` measures it, or declare output_write_gbs")
    problems: list[str] = []
    warnings: list[str] = []
    ceiling = min(MAX_LEAD_S, req.max_time_s)
    head = f"a stop's save needs {needed} s of warning"
    if needed > ceiling:
        problems.append(f"{head} but no lead within the site's limits reaches it (max_time "
                        f"{req.max_time_s} s, sbatch's {MAX_LEAD_S} s): "
                        + _fewer(req, ceiling, gbs, node_bytes))
    elif needed > req.lead_s:
        longer = f"set signal_lead_s: {needed} in the site profile"
        if needed >= req.time_limit_s:
            longer += f" and a --time above {math.ceil(needed / 60)} min"
        warnings.append(f"{head} but the signal lead is {req.lead_s} s: a stop at the time "
                        f"limit is killed mid-save; {longer}; or "
                        + _fewer(req, req.lead_s, gbs, node_bytes) + guess)
    if req.grace_s == 0:
        warnings.append("GraceTime is 0: a preempted job is killed at once and saves nothing; "
                        "periodic saves (save_steps) bound what a preemption loses")
    elif req.grace_s is not None and needed > req.grace_s:
        problems.append(f"{head} but a preemption gives GraceTime {req.grace_s} s, which the "
                        "partition sets: " + _fewer(req, req.grace_s, gbs, node_bytes))
    if req.write is None:  # a guess refuses nothing
        warnings += [f"{p}{guess}" for p in problems]
        problems = []
    warnings += [f"{p} (submit refuses this)" for p in problems]
    return "; ".join(problems), [f"save time: {w}" for w in warnings]
