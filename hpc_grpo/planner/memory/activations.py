"""Activation memory of one GPU during training: with gradient checkpointing or without, and
the cache torch keeps of them. Assumptions (GiB = 2**30 bytes):

* Activations with gradient checkpointing: one bf16 hidden state per layer per token, plus one
  layer's full activations (10·hidden + 5·intermediate bf16 values per token) twice while it is
  recomputed and back-propagated; without checkpointing every layer keeps its full activations.
  The full-layer count is measured (2026-11-23, Qwen2-0.5B shape, 32 × 288 tokens per GPU, H200):
  turning recomputation off raised torch's allocated peak by 12.6 GiB, where 8·hidden +
  4·intermediate values predicted 9.7 GiB.
  Without recomputation the full activations, freed layer by layer in the backward while the
  gradients (under ZeRO, DeepSpeed's reduce buckets) are allocated, leave holes that torch's
  caching allocator keeps reserved: an "allocator cache" line of NO_RECOMPUTE_CACHE of the
  activations, 0.7 under DeepSpeed ZeRO, 0.25 without it. Measured on 2 x H200 (1.5B, 32 × 288
  tokens per GPU, docs/results/2026-11-26-bench-two-1.5b-layouts-h200x2-call1.json): reserved
  less allocated was 19.3 GiB at ZeRO-2 and 8.9 at ZeRO off against 28.9 GiB of activations
  (NVML peaks 72.6 and 76.3 GiB where the plan, without the line, said 61.0 and 69.2); 1.9 GiB
  at 0.5B ZeRO off (2026-11-23). With recomputation the gap was 3-5 GiB, inside the
  fragmentation reserve (estimate.py).
"""

from __future__ import annotations

from hpc_grpo.planner.memory.request import PlanRequest

GIB = float(2**30)
NO_RECOMPUTE_CACHE = {"zero": 0.7, "plain": 0.25}  # × activations, without recomputation


def sequence_length(req: PlanRequest) -> int:
    """vLLM's max_model_len: prompt + completion, capped at the model's context."""
    return min(req.prompt_length + req.completion_length, req.arch.max_position_embeddings)


def activations_gib(req: PlanRequest, checkpointing: bool) -> float:
    arch = req.arch
    tokens = req.per_device_train_batch_size * sequence_length(req)
    full_layer = 2 * (10 * arch.hidden_size + 5 * arch.intermediate_size)
    if checkpointing:
        return tokens * (arch.num_layers * 2 * arch.hidden_size + 2 * full_layer) / GIB
    return tokens * arch.num_layers * full_layer / GIB


def cache_gib(req: PlanRequest, zero: int) -> float:
    """The allocator's cache of freed activations without recomputation (0 with it)."""
    if req.gradient_checkpointing:
        return 0.0
    return NO_RECOMPUTE_CACHE["zero" if zero else "plain"] * activations_gib(req, False)
