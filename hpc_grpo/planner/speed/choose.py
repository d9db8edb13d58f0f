"""The fastest layout that fits, and a line for every other layout tried: why it lost.

A layout that does not fit loses with the memory number that does not fit; one that fits loses
with its predicted s/step. The model is held to 20 % of the measurements, so a layout must be
predicted more than CLEAR_WIN faster than a cheaper one (the chain's order: smaller TP, lower
ZeRO stage, no offload, sleep off) to replace it: a near tie keeps the cheaper, simpler layout
and the plans made before the model existed.

Gradient checkpointing, where the recipe leaves it unset (TRL's default is on): each layout is
tried without recomputation first, then with it, so at the same layout "off" wins wherever it
fits and is predicted faster at all. Recomputation only adds work (the model's sign is sure
even where its size is not: 0.10 s predicted against 0.16-0.20 s measured at 1.5B, terms.py),
and the memory it saves is what the fit checks. A recipe's explicit value is kept.
checkpointing_choice writes the plan's reason for it, citing the measurement (MEASURED_CKPT).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpc_grpo.planner.memory.activations import activations_gib
from hpc_grpo.planner.memory.estimate import Estimate, Layout
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory.search import candidates
from hpc_grpo.planner.speed.hardware_figures import card, links
from hpc_grpo.planner.speed.predict import StepTime, predict

CLEAR_WIN = 0.10
MEASURED_CKPT = ("measured at 1.5B on 2 x H200, ZeRO-2: 1.253 s/step without against 1.449 "
                 "with, docs/results/2026-11-26-bench-two-1.5b-layouts-h200x2-call1.json")


def label(layout: Layout, checkpointing: bool = True) -> str:
    parts = [f"TP {layout.tp}", f"ZeRO-{layout.zero}" if layout.zero else "ZeRO off"]
    if layout.offload_params:
        parts.append("optimizer + parameter offload")
    elif layout.offload_optimizer:
        parts.append("optimizer offload")
    parts.append("sleep" if layout.sleep else "no sleep")
    parts.append("grad ckpt" if checkpointing else "no grad ckpt")
    return ", ".join(parts)


@dataclass(frozen=True)
class Considered:
    """One layout tried: its predicted step (when it fits) and the verdict."""

    layout: str
    step: StepTime
    verdict: str  # "chosen", "does not fit: ...", "slower: ..."

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, **self.step.to_dict(), "verdict": self.verdict}


@dataclass(frozen=True)
class SpeedPlan:
    """The chosen layout's predicted step, what the prediction assumed, and the others tried."""

    step: StepTime
    hardware: str
    considered: tuple[Considered, ...]
    checkpointing: bool = True  # gradient checkpointing of the chosen layout
    with_checkpointing: StepTime | None = None  # checkpointing turned off: the same layout with it

    def to_dict(self) -> dict[str, Any]:
        return {**self.step.to_dict(), "hardware": self.hardware,
                "gradient_checkpointing": self.checkpointing,
                "considered": [row.to_dict() for row in self.considered]}


def hardware_note(req: PlanRequest) -> str:
    gpu, link = card(req), links(req)
    kind = f"{gpu.kind} figures{' (card unknown: assumed)' if gpu.assumed else ''}"
    return (f"{kind}; links {link.intra_gbs:g} GB/s inside a node, {link.inter_gbs:g} GB/s "
            f"between nodes ({link.source})")


def _verdict(est: Estimate, step: StepTime, best: StepTime) -> str:
    if not est.fits:
        return f"does not fit: {est.problem}"
    if step.seconds < best.seconds:
        return (f"not clearly faster: {step.seconds:.2f} s/step against {best.seconds:.2f}, "
                f"within {CLEAR_WIN:.0%}; the cheaper layout stays")
    return f"slower: {step.seconds:.2f} s/step against {best.seconds:.2f}"


def _variants(req: PlanRequest) -> tuple[PlanRequest, ...]:
    """Without recomputation first where the plan may choose, else the recipe's value."""
    if req.choose_checkpointing and req.gradient_checkpointing:
        return replace(req, gradient_checkpointing=False), req
    return (req,)


def fastest(req: PlanRequest) -> tuple[Estimate | None, SpeedPlan | None]:
    """The fitting layout predicted fastest (None when none fits) and the table of the others;
    SpeedPlan.checkpointing says whether it recomputes (planner/memory_plan.py applies it)."""
    variants = _variants(req)
    per_variant = [candidates(one) for one in variants]
    tried = [(one, est, predict(one, est.layout, est.util))
             for index in range(len(per_variant[0]))
             for one, ests in zip(variants, per_variant, strict=True)
             for est in (ests[index],)]
    fitting = [(one, est, step) for one, est, step in tried if est.fits]
    if not fitting:
        return None, None
    quickest = min(step.seconds for _, _, step in fitting)
    mine, chosen, best = next((one, est, step) for one, est, step in fitting
                              if step.seconds * (1 - CLEAR_WIN) <= quickest)
    rows = tuple(Considered(label(est.layout, one.gradient_checkpointing), step,
                            "chosen" if est is chosen else _verdict(est, step, best))
                 for one, est, step in tried)
    other = None
    if not mine.gradient_checkpointing and len(variants) > 1:
        other = next(step for one, est, step in tried
                     if one.gradient_checkpointing and est.layout == chosen.layout)
    return chosen, SpeedPlan(best, hardware_note(req), rows, mine.gradient_checkpointing, other)


def checkpointing_choice(req: PlanRequest, est: Estimate, speed: SpeedPlan) -> str:
    """The plan's choice where the recipe leaves gradient_checkpointing unset."""
    with_gc, without = activations_gib(req, True), activations_gib(req, False)
    memory = f"activations take {with_gc:.1f} GiB with recomputation, {without:.1f} GiB without"
    if not req.gradient_checkpointing and speed.with_checkpointing is not None:
        return (f"False: the plan's choice (the recipe leaves it to TRL's default, True): "
                f"fits without recomputation (training peaks at {est.training:.1f} of "
                f"{req.gpu_memory_gib:g} GiB), predicted {speed.step.seconds:.2f} s/step against "
                f"{speed.with_checkpointing.seconds:.2f} with it ({MEASURED_CKPT}); {memory}")
    off = next((row for row in speed.considered
                if row.layout == label(est.layout, False)), None)
    why = ("not tried" if off is None else off.verdict if off.verdict.startswith("does not fit")
           else f"predicted {off.step.seconds:.2f} s/step, not faster than the layout chosen")
    return f"True: TRL's default (the plan may turn it off; without: {why}); {memory}"
