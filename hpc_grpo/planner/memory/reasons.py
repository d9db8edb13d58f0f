"""One line per choice saying why: the number that decided it, or the alternative that failed."""

from __future__ import annotations

from dataclasses import replace

from hpc_grpo.planner.memory.estimate import (
    Estimate,
    Layout,
    activations_gib,
    estimate,
    max_num_seqs,
    sequence_length,
    vllm_need,
)
from hpc_grpo.planner.memory.lora import lora_reason
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory.search import share_for, valid_tps


def checkpointing(req: PlanRequest) -> str:
    """The recipe's value (plan_request marks an unset one: speed/choose.py's
    checkpointing_choice says why)."""
    return f"{req.gradient_checkpointing}: set by you"


def _lenient(req: PlanRequest, layout: Layout) -> Estimate:
    """The layout with sleep mode on unless the user forbade it: the best case of an alternative."""
    sleep = req.enable_sleep_mode if req.enable_sleep_mode is not None else True
    return estimate(req, replace(layout, sleep=sleep), share_for(req, layout.tp))


def _tp(req: PlanRequest, est: Estimate) -> str:
    arch, tp = req.arch, est.layout.tp
    weights, kv = vllm_need(req, tp)
    tps = valid_tps(arch, req.gpus_per_node)
    if req.tensor_parallel_size:
        return f"{tp}: set by you; vLLM weights {weights:.1f} GiB + KV cache {kv:.1f} GiB per GPU"
    if tp == tps[0]:
        return (f"{tp}: vLLM weights ({weights:.1f} GiB) and KV cache ({kv:.1f} GiB) fit one "
                "GPU's share; a larger TP would only add communication")
    smaller = tps[tps.index(tp) - 1]
    lean_zero = 2 if req.lora else 3
    zero = req.zero_stage if req.zero_stage is not None else lean_zero
    alt = _lenient(req, Layout(smaller, zero, offload_optimizer=bool(req.offload_optimizer)))
    later = "; offload is only tried at the largest TP" if est.layout.offload_optimizer else ""
    return (f"{tp}: at TP {smaller} {alt.problem or 'it does not fit'}{later}; valid sizes divide "
            f"{req.gpus_per_node} GPUs per node, {arch.num_attention_heads} heads and "
            f"{arch.num_kv_heads} KV heads: {', '.join(map(str, tps))}")


def _zero(req: PlanRequest, est: Estimate) -> str:
    zero, world = est.layout.zero, req.world_size
    if req.zero_stage is not None:
        return f"{zero}: set by you"
    if zero == 0:
        return ("0: a single process has nothing to shard; plain PyTorch training as bare TRL "
                "runs it, no DeepSpeed engine")
    if req.lora:
        return ("2: with LoRA only adapters train, and TRL gathers the whole base model for each "
                "weight sync, so ZeRO-3 would not lower the peak")
    if zero == 2:
        return (f"2: replicated bf16 weights ({est.gib('training weights'):.1f} GiB) fit; "
                f"gradients and Adam states are sharded over {world} ranks")
    alt = _lenient(req, Layout(est.layout.tp, 2))
    return f"3: ZeRO-2 at TP {est.layout.tp}: {alt.problem}; ZeRO-3 shards the weights too"


def _offload(req: PlanRequest, est: Estimate) -> str:
    mine = "set by you; " if req.offload_optimizer is not None else ""
    if not est.layout.offload_optimizer:
        return (f"False: {mine}Adam states ({est.gib('optimizer states'):.1f} GiB) and fp32 "
                f"gradients ({est.gib('gradients'):.1f} GiB) fit on the GPU")
    alt = _lenient(req, replace(est.layout, offload_optimizer=False, offload_params=False))
    why = f"ZeRO-{est.layout.zero} without offload at TP {est.layout.tp}: {alt.problem}; "
    return (f"True: {mine}{'' if mine else why}Adam states and fp32 gradients move to CPU "
            f"memory ({est.host_per_node:.0f} of {req.cpu_memory_gib_per_node:g} GiB per node)")


def _offload_params(req: PlanRequest, est: Estimate) -> str:
    if not est.layout.offload_params:
        kind = "fp32" if est.layout.zero == 0 else "bf16"
        return f"False: {kind} weights ({est.gib('training weights'):.1f} GiB) stay on the GPU"
    alt = _lenient(req, replace(est.layout, offload_params=False))
    return (f"True: with optimizer offload alone {alt.problem}; ZeRO-3 fetches each layer's "
            "weights from CPU memory (slow)")


def _sleep(req: PlanRequest, est: Estimate) -> str:
    gpu, budget = req.gpu_memory_gib, est.util * req.gpu_memory_gib
    if req.enable_sleep_mode is not None:
        return f"{est.layout.sleep}: set by you"
    if not est.layout.sleep:
        return (f"False: training ({est.training:.1f} GiB, vLLM's {budget:.1f} GiB included) "
                f"fits in {gpu:g} GiB")
    return (f"True: training with vLLM's {budget:.1f} GiB resident would peak at "
            f"{est.training_without_sleep:.1f} GiB > {gpu:g} GiB; level 2 sleep releases vLLM's "
            "weights and KV cache while training")


def _util(req: PlanRequest, est: Estimate) -> str:
    weights, kv = vllm_need(req, est.layout.tp)
    gpu = req.gpu_memory_gib
    if req.vllm_gpu_memory_utilization is not None:
        return (f"{est.util:g}: set by you; vLLM weights + KV cache need {weights + kv:.1f} of "
                f"the {est.util * gpu:.1f} GiB it gives")
    return (f"{est.util:.2f} = (weights {weights:.1f} + KV cache {kv:.1f} GiB) / {gpu:g} GiB + "
            "0.05 margin, rounded up to 0.05 (at least 0.1)")


def _length(req: PlanRequest) -> str:
    length, prompt = sequence_length(req), req.prompt_length
    total = prompt + req.completion_length
    if length < total:
        return (f"{length}: the model's max_position_embeddings; prompt {prompt} + completion "
                f"{req.completion_length} = {total} is longer, so completions stop at "
                f"{length - prompt} tokens")
    return (f"{length} = max_prompt_length {prompt} + max_completion_length "
            f"{req.completion_length} (model context {req.arch.max_position_embeddings})")


def explain(req: PlanRequest, est: Estimate) -> tuple[tuple[str, str], ...]:
    """Reasons for every field of a GPU plan, in MemoryPlan's field order."""
    tp = est.layout.tp
    seqs = max_num_seqs(req, tp)
    with_gc, without = activations_gib(req, True), activations_gib(req, False)
    return (
        ("tensor_parallel_size", _tp(req, est)),
        ("zero_stage", _zero(req, est)),
        ("offload_optimizer", _offload(req, est)),
        ("offload_params", _offload_params(req, est)),
        ("gradient_checkpointing",
         f"{checkpointing(req)}; activations take {with_gc:.1f} GiB with recomputation, "
         f"{without:.1f} GiB without"),
        ("vllm_gpu_memory_utilization", _util(req, est)),
        ("enable_sleep_mode", _sleep(req, est)),
        ("max_num_seqs",
         f"{seqs} = per_device_train_batch_size {req.per_device_train_batch_size} × TP {tp} × "
         f"steps_per_generation {req.generation_steps}: what one TP group generates at once "
         "(TRL's value)"),
        ("vllm_max_model_length", _length(req)),
        *((("lora", lora_reason(req, est)),) if req.lora else ()),
    )
