"""What LoRA changes in a plan: the adapters' size against full fine-tuning, in one reason line.

The memory model counts LoRA (planner/memory/estimate.py); this says what it changed, so `hpc-grpo plan`
shows why a LoRA job fits where full fine-tuning does not. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from hpc_grpo.errors import UserError
from hpc_grpo.planner.memory.estimate import Estimate, estimate
from hpc_grpo.planner.memory.request import PlanRequest

LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def check_targets(req: PlanRequest) -> None:
    """LoRA on modules the model does not have trains nothing (peft fails on the nodes)."""
    if req.lora and req.trainable_params == 0:
        raise UserError(
            f"lora_target_modules {list(req.lora_target_modules)} name no linear layer of "
            f"{req.arch.name}", field="lora_target_modules",
            hint=f"use some of {', '.join(LINEAR_LAYERS)}, or all-linear")


def lora_reason(req: PlanRequest, est: Estimate) -> str:
    """r, targets, trainable share, and the gradients + Adam state it saves at this layout."""
    adapters, total = req.trainable_params, req.arch.num_params
    targets = ", ".join(req.lora_target_modules) or "every linear layer"
    full = estimate(replace(req, lora=False), est.layout)
    saved = full.gib("gradients") + full.gib("optimizer states") - est.gib("gradients") \
        - est.gib("optimizer states")
    return (f"r={req.lora_rank} on {targets}: {adapters / 1e6:.1f}M trainable parameters "
            f"({100 * adapters / total:.2f}% of {total / 1e9:.1f}B); gradients and Adam states "
            f"only for them ({saved:.1f} GiB less per GPU than full fine-tuning); the frozen "
            "base stays whole on every GPU (no ZeRO-3) and doubles as the reference model")
