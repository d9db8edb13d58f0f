"""GRPO's batch rules, checked before submitting so TRL's ValueError never costs a queue wait.

TRL (GRPOConfig.__post_init__) builds one generation batch of per_device_train_batch_size ×
world_size × steps_per_generation completions, which must split into whole groups of
num_generations completions per prompt, and needs at least two completions to compute an
advantage. vLLM refuses sequences longer than its max_model_len.
"""

from __future__ import annotations

from math import gcd

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.bounds import grpo_value


def _require_positive(value: int | None, field: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UserError(f"{field} is {value!r}, expected a positive integer", field=field)


def _nearest_divisors(n: int, target: int) -> list[int]:
    """Divisors of n that are >= 2, the closest below and above target."""
    divisors = [d for d in range(2, n + 1) if n % d == 0]
    below = [d for d in divisors if d < target]
    above = [d for d in divisors if d > target]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def _nearest_multiples(step: int, target: int) -> list[int]:
    """Positive multiples of step, the closest below and above target."""
    low = (target // step) * step
    return [m for m in (low, low + step) if m >= 1]


def check_batch_rules(*, per_device_train_batch_size: int, num_generations: int,
                      world_size: int, gradient_accumulation_steps: int = 1,
                      steps_per_generation: int | None = None, prompt_length: int | None = None,
                      completion_length: int | None = None,
                      vllm_max_model_length: int | None = None) -> None:
    """Raise UserError naming the field and the nearest valid value when TRL would refuse the run.

    ``vllm_max_model_length`` is the user's own GRPOConfig setting (None when unset), not a plan's.
    """
    for value, field in ((per_device_train_batch_size, "per_device_train_batch_size"),
                         (num_generations, "num_generations"), (world_size, "world_size"),
                         (gradient_accumulation_steps, "gradient_accumulation_steps"),
                         (steps_per_generation, "steps_per_generation"),
                         (prompt_length, "max_prompt_length"),
                         (completion_length, "max_completion_length"),
                         (vllm_max_model_length, "vllm_max_model_length")):
        _require_positive(value, field)
    steps = steps_per_generation or gradient_accumulation_steps
    batch = per_device_train_batch_size * world_size * steps
    if num_generations < 2:
        options = [2] if batch % 2 == 0 else _nearest_divisors(batch, 2)
        raise UserError(
            f"num_generations is {num_generations}: GRPO compares at least 2 completions per "
            "prompt to compute advantages",
            field="num_generations",
            hint=f"use num_generations={options[0]}" if options else
            "use num_generations=2 and per_device_train_batch_size=2",
        )
    if batch % num_generations:
        step = num_generations // gcd(num_generations, world_size * steps)
        divisors = _nearest_divisors(batch, num_generations)
        sizes = " or ".join(str(b) for b in _nearest_multiples(step, per_device_train_batch_size))
        generations = (f"num_generations={' or '.join(str(d) for d in divisors)} (divides "
                       f"{batch}), or " if divisors else "")
        raise UserError(
            f"generation batch per_device_train_batch_size {per_device_train_batch_size} × "
            f"world_size {world_size} × steps_per_generation {steps} = {batch} completions does "
            f"not split into groups of num_generations {num_generations}",
            field="num_generations",
            hint=f"use {generations}per_device_train_batch_size={sizes}",
        )
    if vllm_max_model_length is not None and prompt_length and completion_length:
        total = prompt_length + completion_length
        if total > vllm_max_model_length:
            room = vllm_max_model_length - prompt_length
            shorter = f" or max_completion_length={room}" if room >= 1 else ""
            raise UserError(
                f"max_prompt_length {prompt_length} + max_completion_length {completion_length} = "
                f"{total} exceeds vllm_max_model_length {vllm_max_model_length}",
                field="vllm_max_model_length",
                hint=f"use vllm_max_model_length={total}{shorter}",
            )


def check_spec_batches(spec: JobSpec, world_size: int) -> None:
    """The batch rules for a job spec at ``world_size`` (its values, else TRL's defaults)."""
    check_batch_rules(
        per_device_train_batch_size=grpo_value(spec, "per_device_train_batch_size"),
        num_generations=grpo_value(spec, "num_generations"),
        world_size=world_size,
        gradient_accumulation_steps=grpo_value(spec, "gradient_accumulation_steps"),
        steps_per_generation=spec.grpo.get("steps_per_generation"),
        prompt_length=grpo_value(spec, "max_prompt_length"),
        completion_length=grpo_value(spec, "max_completion_length"),
        vllm_max_model_length=spec.grpo.get("vllm_max_model_length"),
    )
