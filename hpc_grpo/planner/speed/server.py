"""Server mode's plan: the trainer GPU's memory, the server GPU's share, and the step time.

Trainer GPUs hold no engine: the training state of the layout (ZeRO off at one trainer, as
bare TRL runs it; the spec's stage otherwise), the activations of the whole batch they train,
the CUDA overhead and the fragmentation reserve (planner/memory/estimate.py's assumptions).
Measured (../shared/design/gpu-facts-2026-11-25.md, 1.5B on 2 x H100): the trainer's NVML use
grew +3.1 GiB a step (0.5B: +1.45) while torch's allocated peak stayed at 22.9 GiB against
56.2 reserved: the growth is torch's caching allocator's reserve, not live tensors. The plan
warns of it and carries SERVER_TRAINER_ALLOC_CONF for the runtime to set on trainer ranks
(the lead is measuring whether it stops the growth; nothing applies it yet).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpc_grpo.planner.memory.estimate import (
    RESERVE_FRACTION,
    Layout,
    _training_bytes,
    _training_items,
    overhead_gib,
    vllm_need,
)
from hpc_grpo.planner.speed.choose import hardware_note
from hpc_grpo.planner.speed.predict import StepTime, predict_server
from hpc_grpo.planner.types import PlanRequest

SERVER_TRAINER_ALLOC_CONF = "expandable_segments:True"
GROWTH_GIB_PER_STEP_PER_B = 3.1 / 1.54  # the 1.5B measurement, scaled by parameters


@dataclass(frozen=True)
class ServerPlan:
    """Trainer and server GPU memory (GiB), the predicted step, and the allocator hook."""

    trainer: tuple[tuple[str, float], ...]
    server: tuple[tuple[str, float], ...]
    problem: str
    step: StepTime
    hardware: str
    server_trainer_alloc_conf: str = SERVER_TRAINER_ALLOC_CONF

    @property
    def fits(self) -> bool:
        return not self.problem

    def growth_warning(self, params: int) -> str:
        growth = GROWTH_GIB_PER_STEP_PER_B * params / 1e9
        return (f"server mode: the trainer's reserved GPU memory grew about {growth:.1f} GiB a "
                "step in measurements (1.5B: +3.1 GiB/step, torch's caching allocator's reserve, "
                "not live tensors); the plan's trainer total counts live tensors only. "
                f"Hook for the runtime: PYTORCH_CUDA_ALLOC_CONF={self.server_trainer_alloc_conf}")

    def to_dict(self) -> dict[str, Any]:
        return {"trainer_gpu_gib": dict(self.trainer), "server_gpu_gib": dict(self.server),
                "problem": self.problem, **self.step.to_dict(), "hardware": self.hardware,
                "server_trainer_alloc_conf": self.server_trainer_alloc_conf}


def plan_server(req: PlanRequest, server_gpus: int, util: float, zero: int) -> ServerPlan:
    """``req``: the trainers (gpus_per_node = trainer GPUs a node); ``util``: the server's share."""
    gpu = req.gpu_memory_gib
    items = _training_items(req, _training_bytes(req, Layout(1, zero)), zero)
    overhead, reserve = overhead_gib(req, 1), RESERVE_FRACTION * gpu
    total = sum(value for _, value in items) + overhead + reserve
    trainer = (*items, ("CUDA/NCCL overhead", overhead), ("fragmentation reserve", reserve),
               ("total during training", total))
    weights, kv = vllm_need(_server_side(req, server_gpus), 1)
    server = (("vLLM weights", weights), ("KV cache", kv), ("vLLM share", util * gpu))
    problem = ""
    if total > gpu:
        problem = f"the trainer peaks at {total:.1f} GiB per GPU, above {gpu:g} GiB"
    elif weights + kv > util * gpu:
        problem = (f"the server's weights + KV cache need {weights + kv:.1f} GiB, above its "
                   f"{util * gpu:.1f} GiB share")
    return ServerPlan(tuple((n, round(v, 2)) for n, v in trainer),
                      tuple((n, round(v, 2)) for n, v in server), problem,
                      predict_server(req, server_gpus, zero), hardware_note(req))


def _server_side(req: PlanRequest, server_gpus: int) -> PlanRequest:
    """The server engine's batch: every trainer's sequences, split over the server's GPUs."""
    seqs = req.per_device_train_batch_size * req.world_size // server_gpus
    return replace(req, per_device_train_batch_size=max(1, seqs), nodes=1, gpus_per_node=1)

