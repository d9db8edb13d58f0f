"""Server mode's plan: the trainer GPU's memory, the server GPU's share, and the step time.

Trainer GPUs hold no engine: the training state of the layout (ZeRO off at one trainer, as
bare TRL runs it; the spec's stage otherwise), the activations of the whole batch they train,
the CUDA overhead and the fragmentation reserve (planner/memory/estimate.py's assumptions).
The trainer's reserved memory grows and levels off, measured twice:
../shared/design/gpu-facts-2026-11-25.md (2 x H100, 10 steps: +3.1 GiB a step at 1.5B, +1.45 at
0.5B) and docs/results/2026-11-26-server-trainer-memory-45-steps-h200x2.json (2 x H200, 1.5B, 45
steps: +3.1 GiB a step for 16 steps, then flat at 74.8 GiB reserved, 77.3 GiB NVML, for the other
29; torch's allocated peak 22.9 GiB throughout; no OOM, step times flat). It is torch's caching
allocator keeping freed blocks, not live tensors; the allocator frees its cache and retries
before it fails an allocation. PYTORCH_CUDA_ALLOC_CONF=expandable_segments did not stop it
(+2.1 GiB a step, not flat in 10 steps: the 2026-11-26 layouts files), so the runtime sets no
allocator option and the plan carries none. growth_warning says what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpc_grpo.planner.memory.estimate import (
    CPU_USABLE_FRACTION,
    RESERVE_FRACTION,
    Layout,
    _host_gib,
    _training_bytes,
    _training_items,
    overhead_gib,
    vllm_need,
)
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.speed.choose import hardware_note
from hpc_grpo.planner.speed.predict import StepTime, predict_server


@dataclass(frozen=True)
class ServerPlan:
    """Trainer and server GPU memory (GiB) and the predicted step."""

    trainer: tuple[tuple[str, float], ...]
    server: tuple[tuple[str, float], ...]
    problem: str
    step: StepTime
    hardware: str
    host_gib: float = 0.0  # a trainer node's CPU memory for the offloaded optimizer (0 without)

    @property
    def fits(self) -> bool:
        return not self.problem

    def growth_warning(self) -> str:
        total = dict(self.trainer)["total during training"]
        return ("server mode: the trainer GPU's reserved memory grows each step, then levels off. "
                "Measured at 1.5B on an H200 (141 GB): +3.1 GiB a step for 16 steps, then flat at "
                "74.8 GiB reserved (77.3 GiB NVML) for the other 29 of 45 steps, with live tensors "
                "at 22.9 GiB throughout, no OOM and flat step times (0.5B on an H100: +1.45 GiB a "
                "step over 10 steps). It is torch's caching allocator keeping freed blocks, not a "
                "leak: the allocator frees its cache before it fails an allocation. The plan's "
                f"trainer total ({total:.1f} GiB) counts live tensors; the cache can fill the rest "
                "of the card. Risk: another process on that GPU finds it full; on a card smaller "
                "than that plateau (80 GB cards: not measured) the cache must be trimmed, at a "
                "cost not measured.")

    def to_dict(self) -> dict[str, Any]:
        return {"trainer_gpu_gib": dict(self.trainer), "server_gpu_gib": dict(self.server),
                "trainer_node_cpu_gib": round(self.host_gib, 2),
                "problem": self.problem, **self.step.to_dict(), "hardware": self.hardware}


def plan_server(req: PlanRequest, server_gpus: int, util: float, zero: int, *,
                across_nodes: bool | None = None) -> ServerPlan:
    """``req``: the trainers (nodes and gpus_per_node: those that train); ``util``: the server's
    share; ``across_nodes``: the server is on another node than trainer rank 0 (the weights go
    over the link between nodes; unset: when the trainers span nodes, predict_server).
    The optimizer offload the spec asks for (``req.offload_optimizer`` with ZeRO 2 or 3, as the
    runtime's DeepSpeed block gives it; modes.check_server_zero refuses it without ZeRO) moves
    Adam's states to the trainers' nodes' CPU memory, which is then checked too. The host model
    (host.py) was fitted on colocated ranks, whose process holds an engine; a server-mode
    trainer holds none, and the `vllm serve` process on the last node is not counted: neither is
    measured."""
    gpu = req.gpu_memory_gib
    layout = Layout(1, zero, offload_optimizer=bool(req.offload_optimizer) and zero > 0)
    training = _training_bytes(req, layout)
    items = _training_items(req, training, zero)
    overhead, reserve = overhead_gib(req, 1), RESERVE_FRACTION * gpu
    total = sum(value for _, value in items) + overhead + reserve
    host = _host_gib(req, layout, training)
    trainer = (*items, ("CUDA/NCCL overhead", overhead), ("fragmentation reserve", reserve),
               ("total during training", total))
    weights, kv = vllm_need(_server_side(req, server_gpus), 1)
    server = (("vLLM weights", weights), ("KV cache", kv), ("vLLM share", util * gpu))
    usable = CPU_USABLE_FRACTION * req.cpu_memory_gib_per_node
    problem = ""
    if total > gpu:
        problem = f"the trainer peaks at {total:.1f} GiB per GPU, above {gpu:g} GiB"
    elif host > usable:
        problem = (f"the trainers' offloaded state needs {host:.0f} GiB of CPU memory per node, "
                   f"above {usable:.0f} GiB usable ({CPU_USABLE_FRACTION:.0%} of "
                   f"{req.cpu_memory_gib_per_node:g})")
    elif weights + kv > util * gpu:
        problem = (f"the server's weights + KV cache need {weights + kv:.1f} GiB, above its "
                   f"{util * gpu:.1f} GiB share")
    return ServerPlan(tuple((n, round(v, 2)) for n, v in trainer),
                      tuple((n, round(v, 2)) for n, v in server), problem,
                      predict_server(req, server_gpus, zero, layout.offload_optimizer,
                                     across_nodes=across_nodes),
                      hardware_note(req), host)


def _server_side(req: PlanRequest, server_gpus: int) -> PlanRequest:
    """The server engine's batch: every trainer's sequences, split over the server's GPUs."""
    seqs = req.per_device_train_batch_size * req.world_size // server_gpus
    return replace(req, per_device_train_batch_size=max(1, seqs), nodes=1, gpus_per_node=1)

