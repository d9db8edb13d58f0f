"""The memory plan of a colocated GPU job (``plan_memory``, its answer ``MemoryPlan``): check
the request, take the layout the speed room predicts fastest among those the memory room finds
to fit, and give a reason for every choice, or say what would fit. It sits above both rooms and
ties them together."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.planner.batch import check_batch_rules
from hpc_grpo.planner.memory.arch import ModelArch
from hpc_grpo.planner.memory.estimate import Estimate, sequence_length
from hpc_grpo.planner.memory.hints import smallest_change
from hpc_grpo.planner.memory.lora import check_targets
from hpc_grpo.planner.memory.reasons import explain
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory.search import search, tp_divisibility, valid_tps
from hpc_grpo.planner.speed.choose import SpeedPlan, checkpointing_choice, fastest, label
from hpc_grpo.rundir.contract import DEFAULT_VLLM_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True)
class MemoryPlan:
    """The chosen layout, its per-GPU memory estimate in GiB and one reason per choice."""

    tensor_parallel_size: int
    zero_stage: int
    offload_optimizer: bool
    offload_params: bool
    gradient_checkpointing: bool
    vllm_gpu_memory_utilization: float
    enable_sleep_mode: bool
    max_num_seqs: int
    vllm_max_model_length: int
    breakdown: tuple[tuple[str, float], ...]
    reasons: tuple[tuple[str, str], ...]
    speed: SpeedPlan | None = None  # predicted step time and the layouts it beat (not in run.json)

    def gib(self, item: str) -> float:
        """One breakdown line by name (KeyError when absent)."""
        for name, value in self.breakdown:
            if name == item:
                return value
        raise KeyError(item)

    def reason(self, choice: str) -> str:
        return dict(self.reasons)[choice]

    @property
    def peak_gib(self) -> float:
        return max(self.gib("total during training"), self.gib("total during generation"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: breakdown and reasons as ordered mappings."""
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "zero_stage": self.zero_stage,
            "offload_optimizer": self.offload_optimizer,
            "offload_params": self.offload_params,
            "gradient_checkpointing": self.gradient_checkpointing,
            "vllm_gpu_memory_utilization": self.vllm_gpu_memory_utilization,
            "enable_sleep_mode": self.enable_sleep_mode,
            "max_num_seqs": self.max_num_seqs,
            "vllm_max_model_length": self.vllm_max_model_length,
            "breakdown_gib": dict(self.breakdown),
            "reasons": dict(self.reasons),
        }


def _validate(req: PlanRequest) -> None:
    if not isinstance(req.arch, ModelArch):
        raise UserError("the plan request has no model architecture", field="model")
    for name in ("nodes", "gpus_per_node"):
        value = getattr(req, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} is {value!r}, expected a positive integer", field=name)
    if not req.gpu_memory_gib > 0:
        raise UserError(f"gpu_memory_gib is {req.gpu_memory_gib!r}, expected > 0",
                        field="gpu_memory_gib")
    if not req.cpu_memory_gib_per_node > 0:
        raise UserError(f"cpu_memory_gib_per_node is {req.cpu_memory_gib_per_node!r}, "
                        "expected > 0", field="cpu_memory_gib_per_node")
    check_targets(req)
    if req.beta < 0:
        raise UserError(f"beta is {req.beta}, expected >= 0", field="beta")
    check_batch_rules(
        per_device_train_batch_size=req.per_device_train_batch_size,
        num_generations=req.num_generations, world_size=req.world_size,
        gradient_accumulation_steps=req.gradient_accumulation_steps,
        steps_per_generation=req.steps_per_generation, prompt_length=req.prompt_length,
        completion_length=req.completion_length,
    )
    context = req.arch.max_position_embeddings
    if req.prompt_length >= context:
        raise UserError(
            f"prompts of {req.prompt_length} tokens leave no room for completions in "
            f"{req.arch.name}'s {context}-token context",
            field="max_prompt_length", hint=f"use max_prompt_length={context // 2} or less",
        )


def check_zero_stage(zero: int | None) -> None:
    """The ZeRO stages offered, for the colocated plan and server mode's trainers alike."""
    if zero is not None and zero not in (0, 2, 3):
        raise UserError(f"zero_stage {zero!r} is not supported", field="zero_stage",
                        hint="use 2 (ZeRO-1 saves nothing over it here) or 3, or leave it unset")


def _validate_overrides(req: PlanRequest) -> None:
    tp = req.tensor_parallel_size
    if tp is not None:
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise UserError(f"tensor_parallel_size is {tp!r}, expected a positive integer",
                            field="tensor_parallel_size")
        failed = tp_divisibility(req.arch, req.gpus_per_node, tp)
        if failed:
            valid = ", ".join(map(str, valid_tps(req.arch, req.gpus_per_node)))
            raise UserError(
                f"tensor_parallel_size {tp} does not divide {' nor '.join(failed)}",
                field="tensor_parallel_size",
                hint=f"valid here: {valid} (a TP group is whole heads on GPUs of one node)",
            )
    check_zero_stage(req.zero_stage)
    if req.offload_optimizer and req.zero_stage == 0:
        raise UserError("offload_optimizer needs DeepSpeed ZeRO, but zero_stage is 0",
                        field="offload_optimizer", hint="use zero_stage 2 or 3")
    util = req.vllm_gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise UserError(f"vllm_gpu_memory_utilization {util} is not in (0, 1]",
                        field="vllm_gpu_memory_utilization",
                        hint=f"e.g. {DEFAULT_VLLM_GPU_MEMORY_UTILIZATION}, or leave it unset")


def _choice(est: Estimate, name: str) -> Any:
    layout = est.layout
    return {"tensor_parallel_size": layout.tp, "zero_stage": layout.zero,
            "offload_optimizer": layout.offload_optimizer, "enable_sleep_mode": layout.sleep,
            "vllm_gpu_memory_utilization": est.util}[name]


def _no_fit(req: PlanRequest, leanest: Estimate | None) -> UserError:
    problem = leanest.problem if leanest else "no layout satisfies the overrides"
    overrides = req.overrides()
    free = req.without_overrides()
    if overrides and search(free)[0] is not None:
        culprits = [name for name in overrides
                    if search(req.without_overrides(name))[0] is not None]
        name = (culprits or list(overrides))[0]
        without = search(req.without_overrides(name))[0] or search(free)[0]
        assert without is not None
        return UserError(
            f"{name}={overrides[name]} cannot fit: {problem}", field=name,
            hint=f"leave {name} unset: the planner would choose {_choice(without, name)}",
        )
    where = (f"{req.nodes} node{'s' if req.nodes > 1 else ''} of {req.gpus_per_node} × "
             f"{req.gpu_memory_gib:g} GiB GPUs")
    return UserError(f"{req.arch.name} does not fit on {where}: {problem}", field="model",
                     hint=smallest_change(free))


_CHOICES = (("tensor_parallel_size", "tp"), ("zero_stage", "zero"),
            ("offload_optimizer", "offload_optimizer"), ("offload_params", "offload_params"),
            ("enable_sleep_mode", "sleep"))


def _speed_reasons(req: PlanRequest, cheapest: Estimate, chosen: Estimate,
                   speed: SpeedPlan) -> tuple[tuple[str, str], ...]:
    """The memory reasons, with those choices where a cheaper layout fits but is slower."""
    reasons = dict(explain(req, chosen))
    slower = next((row for row in speed.considered if row.verdict.startswith("slower")
                   and row.layout == label(cheapest.layout, req.gradient_checkpointing)), None)
    if slower is None:
        return tuple(reasons.items())
    for field, attr in _CHOICES:
        value, cheap = getattr(chosen.layout, attr), getattr(cheapest.layout, attr)
        if value != cheap:
            reasons[field] = (f"{value}: faster; {slower.layout} also fits but is predicted at "
                              f"{slower.step.seconds:.2f} s/step against {speed.step.seconds:.2f}")
    return tuple(reasons.items())


def plan_memory(req: PlanRequest) -> MemoryPlan:
    """The fastest layout that fits (planner/speed), with its memory breakdown and a reason for
    every choice.

    Raises UserError when nothing fits, naming the override at fault or the smallest change
    (nodes, GPU memory, LoRA, batch, length, CPU memory) that would fit.
    """
    _validate(req)
    _validate_overrides(req)
    cheapest, leanest = search(req)
    found, speed = fastest(req)
    if found is None or cheapest is None or speed is None:
        raise _no_fit(req, leanest)
    if speed.checkpointing != req.gradient_checkpointing:  # the plan turned recomputation off
        req = replace(req, gradient_checkpointing=speed.checkpointing)
        cheapest = search(req)[0] or found
    reasons = (explain(req, found) if found is cheapest or found.layout == cheapest.layout
               else _speed_reasons(req, cheapest, found, speed))
    if req.choose_checkpointing:
        reasons = tuple((name, checkpointing_choice(req, found, speed) if
                         name == "gradient_checkpointing" else text) for name, text in reasons)
    layout = found.layout
    return MemoryPlan(
        tensor_parallel_size=layout.tp, zero_stage=layout.zero,
        offload_optimizer=layout.offload_optimizer, offload_params=layout.offload_params,
        gradient_checkpointing=req.gradient_checkpointing,
        vllm_gpu_memory_utilization=round(found.util, 2), enable_sleep_mode=layout.sleep,
        max_num_seqs=req.per_device_train_batch_size * layout.tp * req.generation_steps,
        vllm_max_model_length=sequence_length(req),
        breakdown=found.items, reasons=reasons, speed=speed,
    )
