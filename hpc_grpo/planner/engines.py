"""The engines' plans: vLLM's settings and DeepSpeed's, as the run record's typed blocks.

The memory plan decides where there is one; otherwise the spec's values or TRL's defaults stand.
Server mode has its own block: trainers run no engine and ``vllm serve`` owns its GPUs.
"""

from __future__ import annotations

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.planner.memory_plan import MemoryPlan
from hpc_grpo.planner.topology import ServerSplit
from hpc_grpo.rundir.contract import (
    DEFAULT_VLLM_GPU_MEMORY_UTILIZATION,
    DeepSpeedBlock,
    ServerBlock,
    VllmBlock,
)

# `vllm serve` owns its GPUs in server mode: vLLM's own default share, not the colocated one.
SERVER_GPU_MEMORY_UTILIZATION = 0.9



def vllm_plan(site: SiteProfile, spec: JobSpec, memory: MemoryPlan | None,
              server: ServerSplit | None, sequence_tokens: int) -> VllmBlock:
    """The engines' settings: the memory plan's where there is one, else the spec's or TRL's."""
    if server is not None:  # trainers run no engine; `vllm serve` owns its GPUs
        return VllmBlock(
            enabled=True, mode="server", tensor_parallel_size=1,
            gpu_memory_utilization=spec.vllm_gpu_memory_utilization
            or SERVER_GPU_MEMORY_UTILIZATION,
            max_model_length=sequence_tokens,
            server=ServerBlock(node=server.server_node, gpus=server.server_gpus,
                               trainer_gpus=server.trainer_gpus))
    if memory is not None:
        return VllmBlock(
            enabled=site.device == "cuda", mode=spec.vllm_mode,
            tensor_parallel_size=memory.tensor_parallel_size,
            gpu_memory_utilization=memory.vllm_gpu_memory_utilization,
            enable_sleep_mode=memory.enable_sleep_mode,
            max_model_length=memory.vllm_max_model_length)
    return VllmBlock(
        enabled=site.device == "cuda", mode=spec.vllm_mode,
        tensor_parallel_size=spec.tensor_parallel_size or 1,
        gpu_memory_utilization=spec.vllm_gpu_memory_utilization or DEFAULT_VLLM_GPU_MEMORY_UTILIZATION,
        enable_sleep_mode=bool(spec.vllm_enable_sleep_mode))


def deepspeed_plan(device: str, spec: JobSpec, memory: MemoryPlan | None) -> DeepSpeedBlock | None:
    zero = memory.zero_stage if memory else spec.zero_stage
    if not zero:
        return None
    offload = memory.offload_optimizer if memory else bool(spec.offload_optimizer)
    return DeepSpeedBlock(zero_stage=zero, offload_optimizer=offload,
                          overlap_comm=device == "cuda", contiguous_gradients=True)
