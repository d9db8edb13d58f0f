"""What the memory plan is asked (PlanRequest): one GRPO job on GPUs, the model's shape, the
cluster's sizes, the recipe's batch and the user's fixed choices. A plain frozen value; the
speed room reads its step-time inputs too."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpc_grpo.planner.memory.arch import ModelArch
from hpc_grpo.rundir.contract import world_size


@dataclass(frozen=True)
class PlanRequest:
    """One GRPO job on GPUs as the planner sees it; override fields left None are the planner's.

    CPU sites get no memory plan (planner/job.py, planner/report.py say why)."""

    arch: ModelArch
    nodes: int
    gpus_per_node: int  # ranks per node
    gpu_memory_gib: float
    cpu_memory_gib_per_node: float
    prompt_length: int
    completion_length: int
    per_device_train_batch_size: int
    num_generations: int
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None  # None: TRL's default, gradient_accumulation_steps
    lora: bool = False
    lora_rank: int = 64
    lora_target_modules: tuple[str, ...] = ()  # none: every linear layer (the most memory)
    beta: float = 0.0  # KL weight; > 0 loads a reference model (not with LoRA: adapters off)
    gradient_checkpointing: bool = True  # the recipe's value, else TRL's default (True)
    # the recipe leaves gradient_checkpointing unset: the plan may turn it off where it fits
    # and is predicted faster (planner/speed/choose.py)
    choose_checkpointing: bool = False
    tensor_parallel_size: int | None = None
    zero_stage: int | None = None
    offload_optimizer: bool | None = None
    enable_sleep_mode: bool | None = None
    vllm_gpu_memory_utilization: float | None = None
    pure_bf16: bool = False  # without DeepSpeed: bf16 weights, gradients and Adam states
    # Step-time inputs (planner/speed/hardware_figures.py): link bus bandwidths in GB/s, None =
    # assumed there; where they came from ("measured by doctor 2026-11-25", "assumed"); the
    # card's name.
    intra_node_gbs: float | None = None
    inter_node_gbs: float | None = None
    link_source: str = ""
    gpu_name: str = ""

    @property
    def world_size(self) -> int:
        return world_size(self.nodes, self.gpus_per_node)

    @property
    def trainable_params(self) -> int:
        """What the optimizer updates: the LoRA adapters, or every weight."""
        if self.lora:
            return self.arch.lora_params(self.lora_rank, self.lora_target_modules)
        return self.arch.num_params

    @property
    def generation_steps(self) -> int:
        return self.steps_per_generation or self.gradient_accumulation_steps

    def overrides(self) -> dict[str, Any]:
        """The user's fixed choices, by field name."""
        names = ("tensor_parallel_size", "zero_stage", "offload_optimizer", "enable_sleep_mode",
                 "vllm_gpu_memory_utilization")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def without_overrides(self, *names: str) -> PlanRequest:
        """This request with the named overrides (all, when none is named) left to the planner."""
        cleared: dict[str, Any] = {name: None for name in (names or tuple(self.overrides()))}
        return replace(self, **cleared)
