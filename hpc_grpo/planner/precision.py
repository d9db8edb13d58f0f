"""What the ranks train in, and whether prompt plus completion fits the model: one story for
recipe, plan and ranks. The load dtype is the ranks' own decision (``rundir/precision.py``
``load_dtype``), called here too, so that ``plan`` reports and the memory plan sizes what the
ranks will do. Pure: values in, values out.
"""

from __future__ import annotations

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.blocks import model_block
from hpc_grpo.planner.bounds import grpo_value, prompt_bound
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.rundir.contract import DeepSpeedBlock, ModelBlock
from hpc_grpo.rundir.precision import as_loaded, load_dtype


def precision(device: str, spec: JobSpec,
              deepspeed: DeepSpeedBlock | None) -> tuple[str, tuple[str, ...], list[str]]:
    """(what the ranks train in, what changed from the recipe: the command line's changes and
    the load dtype where it is not the recipe's, warnings: pure bf16's)."""
    loads = load_dtype(model_block(spec), deepspeed is not None)
    shown = loads or "float32"
    if spec.pure_bf16:
        story = "pure bf16: weights, gradients and Adam states bf16 (pure_bf16: true)"
    elif device != "cuda":
        story = f"fp32: weights, gradients and Adam states (the model loads {shown})"
    elif deepspeed is not None:
        story = (f"bf16 compute, fp32 master weights and Adam states in DeepSpeed ZeRO-"
                 f"{deepspeed.zero_stage}'s optimizer (the model loads {shown})")
    else:
        story = f"fp32 weights and Adam states, bf16 autocast (the model loads {shown})"
    changes = spec.changes
    if spec.dtype and loads != spec.dtype:
        changes += (f"dtype: {spec.dtype} -> {shown} (plan: fp32 master weights without "
                    "DeepSpeed; --set pure_bf16=true trains bf16 weights and Adam states)",)
    warnings = ["pure_bf16: bf16 weights and Adam states lose small updates (no fp32 master "
                "copy); drop it for fp32 master weights"] if spec.pure_bf16 else []
    return story, changes, warnings


def loaded_block(spec: JobSpec, model: ModelRef, site: SiteProfile,
                 deepspeed: DeepSpeedBlock | None) -> ModelBlock:
    """run.json's model block, its dtype the one the ranks load in (not the recipe's: a CPU run
    recorded bfloat16 and trained float32, issue #58)."""
    return as_loaded(model_block(spec, model, site), deepspeed is not None)


def context_check(spec: JobSpec, context: int) -> list[str]:
    """Prompt plus completion must fit the model's positions (config.json
    max_position_embeddings): beyond them transformers only warns ("indexing errors") and the
    run trains on positions the model never learnt, or vLLM refuses max_model_len on every rank.
    Refused where the prompt bound is known (set, measured, or a built-in dataset's); a warning
    where it is the unmeasured default guess. Returns the warning (none when it fits)."""
    prompt, completion = prompt_bound(spec), int(grpo_value(spec, "max_completion_length"))
    if not context or prompt + completion <= context:
        return []
    room = context - prompt
    half = context // 2
    hint = (f"--set max_completion_length={room}" if room > 0 else
            f"a model with a longer context, or prompts of at most {half} tokens: --set "
            f"max_prompt_length={half} --set max_completion_length={context - half} (a longer "
            "prompt is then refused)")
    text = (f"prompt {prompt} + completion {completion} = {prompt + completion} tokens, above "
            f"the model's context of {context} (config.json max_position_embeddings)")
    if spec.max_prompt_length or spec.dataset.startswith("builtin:"):
        raise UserError(text, field="max_completion_length", hint=hint)
    return [f"{text}; the prompt bound {prompt} is a default, not measured here: set "
            f"max_prompt_length, or {hint}"]
