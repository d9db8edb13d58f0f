"""The dtype the ranks load the model in, read by both sides: the ranks load with it
(runtime/rank/setup/grpo_args.py), the plan reports it and sizes memory and checkpoints for it
(planner/precision.py), so that recipe, plan and ranks tell one precision story. Stdlib only."""

from __future__ import annotations

import dataclasses

from hpc_grpo.rundir.contract import ModelBlock


def load_dtype(block: ModelBlock, deepspeed: bool) -> str:
    """``block``'s load dtype for a run with or without DeepSpeed.

    Without DeepSpeed the optimizer updates the module's own weights, so a model loaded in bf16
    (open-r1's ``torch_dtype: bfloat16``) trained pure bf16, weights and Adam moments, while the
    plan said fp32 (issue #27). It loads float32 instead, its own fp32 master copy under bf16
    autocast, unless ``pure_bf16`` asks for bf16 weights and states. Under DeepSpeed the dtype
    stands: its optimizer keeps fp32 master weights and Adam states whatever the module's
    dtype. "" is TRL's default, float32."""
    if block.pure_bf16:
        return "bfloat16"
    if not deepspeed and block.dtype in ("auto", "bfloat16", "float16"):  # auto: bf16 mostly
        return "float32"
    return block.dtype


def as_loaded(block: ModelBlock, deepspeed: bool) -> ModelBlock:
    """``block`` with the dtype the ranks load in, as run.json records it: the asked dtype was
    recorded, so run.json said bfloat16 where the ranks trained float32 (issue #58). Idempotent
    (``load_dtype`` of a load dtype is itself), so a run.json written before records the asked
    dtype and the ranks still load the same."""
    return dataclasses.replace(block, dtype=load_dtype(block, deepspeed))
