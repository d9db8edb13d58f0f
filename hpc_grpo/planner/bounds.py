"""The GRPOConfig values the plan computes with where the spec leaves them to TRL, and the
longest prompt the plan sizes for. Pure."""

from __future__ import annotations

from typing import Any

from hpc_grpo.config.spec import JobSpec

# TRL 1.16 GRPOConfig defaults the batch rules depend on.
TRL_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "num_generations": 8,
    "gradient_accumulation_steps": 1,
    "max_prompt_length": 512,  # not a GRPOConfig field in 1.16: a job setting (JobSpec)
    "max_completion_length": 256,
    "beta": 0.0,
    "gradient_checkpointing": True,
}
# Longest prompt of each built-in dataset in tokens of any byte-level tokenizer (at most one per
# byte, plus BOS), checked against the built-in models by tests/unit/runtime/rank/test_runtime_data.py.
BUILTIN_PROMPT_TOKENS = {"builtin:digits": 32, "builtin:sums": 32}


def grpo_value(spec: JobSpec, key: str) -> Any:
    """A GRPOConfig value the plan computes with: the spec's, else TRL's default."""
    if key == "max_prompt_length":
        return prompt_bound(spec)
    return spec.grpo.get(key, TRL_DEFAULTS[key])


def split_pinned(spec: JobSpec) -> dict[str, int]:
    """min_nodes: the batch values an attempt on fewer nodes splits anew, written out where TRL's
    defaults stand in, so the nodes' rule (rundir/reshard.record_at) needs no table of ours."""
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps")
    return {key: int(grpo_value(spec, key)) for key in keys} if spec.min_nodes else {}


def prompt_bound(spec: JobSpec) -> int:
    """The longest prompt (tokens) the plan sizes vLLM and activations for."""
    if spec.max_prompt_length:
        return spec.max_prompt_length
    return BUILTIN_PROMPT_TOKENS.get(spec.dataset, TRL_DEFAULTS["max_prompt_length"])
