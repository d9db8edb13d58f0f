"""The trivial plan for device="cpu": fp32 training, generation with transformers, no vLLM.

Nothing is chosen, so the plan only checks that every process of a node fits in its memory
(fp32 weights, gradients, Adam m and v, activations, a KV cache for the generation batch).
"""

from __future__ import annotations

from hpc_grpo.errors import UserError
from hpc_grpo.planner.memory import (
    CPU_USABLE_FRACTION,
    GIB,
    activations_gib,
    sequence_length,
)
from hpc_grpo.planner.reasons import checkpointing
from hpc_grpo.planner.types import MemoryPlan, PlanRequest

PROCESS_GIB = 2.0  # Python, torch and tokenizer per process


def cpu_plan(req: PlanRequest) -> MemoryPlan:
    arch, length = req.arch, sequence_length(req)
    trainable = req.trainable_params
    seqs = req.per_device_train_batch_size * req.generation_steps
    items = [("training weights", 4 * (arch.num_params + (trainable if req.lora else 0)))]
    if req.beta and not req.lora:
        items.append(("reference model", 4 * arch.num_params))
    items += [("gradients", 4 * trainable), ("optimizer states", 8 * trainable)]
    resident = sum(value for _, value in items) / GIB + PROCESS_GIB
    kv_cache = 2 * arch.kv_bytes_per_token * length * seqs / GIB  # fp32 on CPU
    activations = 2 * activations_gib(req, req.gradient_checkpointing)  # fp32
    training, generation = resident + activations, resident + kv_cache
    per_node = req.gpus_per_node * max(training, generation)
    usable = CPU_USABLE_FRACTION * req.cpu_memory_gib_per_node
    if per_node > usable:
        raise UserError(
            f"fp32 training of {arch.name} on CPU needs {per_node:.0f} GiB per node, above "
            f"{usable:.0f} GiB usable ({CPU_USABLE_FRACTION:.0%} of "
            f"{req.cpu_memory_gib_per_node:g})",
            field="model", hint="use fewer processes per node, LoRA, or a smaller model",
        )
    breakdown = [(name, value / GIB) for name, value in items] + [
        ("activations", activations), ("KV cache", kv_cache), ("process overhead", PROCESS_GIB),
        ("total during training", training), ("total during generation", generation),
        ("CPU memory per node", per_node)]
    no_vllm = "device=cpu: no vLLM"
    return MemoryPlan(
        tensor_parallel_size=1, zero_stage=0, offload_optimizer=False, offload_params=False,
        gradient_checkpointing=req.gradient_checkpointing, vllm_gpu_memory_utilization=0.0,
        enable_sleep_mode=False,
        max_num_seqs=seqs, vllm_max_model_length=length,
        breakdown=tuple((name, round(value, 2)) for name, value in breakdown),
        reasons=(
            ("tensor_parallel_size", f"1: {no_vllm}; each process generates with transformers"),
            ("zero_stage", "0: device=cpu trains plain DDP over gloo"),
            ("offload_optimizer", "False: on CPU everything is in CPU memory already"),
            ("offload_params", "False: on CPU everything is in CPU memory already"),
            ("gradient_checkpointing", checkpointing(req)),
            ("vllm_gpu_memory_utilization", f"0.0: {no_vllm}"),
            ("enable_sleep_mode", f"False: {no_vllm}"),
            ("max_num_seqs", f"{seqs} = per_device_train_batch_size × steps_per_generation: "
                             "the completions one process generates per step"),
            ("vllm_max_model_length", f"{length}: prompt + completion, capped at the model's "
                                      "context"),
        ),
    )
