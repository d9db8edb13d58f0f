"""The planner's shared types: the model it plans for (ModelRef), what the memory plan is asked
(PlanRequest) and what it answers (MemoryPlan). Plain frozen values."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hpc_grpo.planner.memory.arch import ModelArch
from hpc_grpo.rundir.contract import world_size

if TYPE_CHECKING:
    from hpc_grpo.planner.speed.choose import SpeedPlan


@dataclass(frozen=True)
class ModelRef:
    """The model as the ranks will load it, and its architecture when known."""

    source: str  # absolute local folder or hub id
    local: bool
    arch: ModelArch | None
    commit: str = ""  # a hub id staged in the site's hf_home: the pinned commit
    hf_home: str = ""  # the site's shared Hugging Face cache, expanded on the login node
    context: int = 0  # max_position_embeddings where known without the arch (a built-in model)


@dataclass(frozen=True)
class LinkFigures:
    """The link bandwidths a plan uses (GB/s, an all-reduce's bus bandwidth), found by the
    launcher (the profile's declared figures, else doctor's cached measurement:
    preflight/links.py); None for a figure that is assumed (planner/speed/hardware.py)."""

    intra_node_gbs: float | None = None
    inter_node_gbs: float | None = None
    source: str = ""


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
    # Step-time inputs (planner/speed/hardware.py): link bus bandwidths in GB/s, None = assumed
    # there; where they came from ("measured by doctor 2026-11-25", "assumed"); the card's name.
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
