"""The planner's shared types: the model it plans for (ModelRef), the link figures the launcher
found (LinkFigures) and what the memory plan answers (MemoryPlan). Plain frozen values; what the
memory plan is asked (PlanRequest) is memory/request.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpc_grpo.planner.memory.arch import ModelArch

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
