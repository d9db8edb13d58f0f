"""DeepSpeed ZeRO-3's optimizer sub-groups on one rank, counted from the model's tensors.

Why this exists: with optimizer offload every sub-group's fp32 gradient buffer is pinned, and
torch's pinned allocator rounds each block up to a power of two (host.py), so the sizes of the
groups, not only their sum, decide the host memory. Splitting the rank's share into whole 1e9
element groups and one remainder (the earlier model) was exact for 1.5B with 1 and 2 ranks and
7B with 2, and 2 GiB high for 7B on one rank: measured 42.0 GiB of pinned memory against 44.0
(docs/results/2026-11-26-memory-offload-7b-1rank-partial-h100x2.json), because real groups
overshoot 1e9 by up to one tensor and leave a smaller remainder.

Assumptions (DeepSpeed 0.19, transformers 5, the dense decoders of arch.py):

* The trainer gives the optimizer two parameter groups (transformers'
  ``Trainer.get_decay_parameter_names``): weight decay for the matrices and embeddings, none for
  biases and norm weights. DeepSpeed forms sub-groups inside each parameter group on its own
  (``stage3.py``, ``_create_fp16_sub_groups``), walking the tensors in the model's order and
  closing a group once it holds at least ``sub_group_size`` elements, or at the group's last
  tensor; a group that holds everything is one group.
* A tensor's partition on one rank is ``ceil(numel / world)`` elements (ZeRO-3 pads the last).
* Tensor order of a Qwen2/Llama decoder: the embedding; per layer q, k, v (each weight then its
  bias), o, q/k norms where the shape has them, gate, up, down, the two layer norms; the final
  norm; the output head unless tied to the embedding.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

from hpc_grpo.planner.memory.arch import ModelArch

SUB_GROUP_ELEMENTS = 10**9  # DeepSpeed's default sub_group_size


def _tensors(arch: ModelArch) -> Iterator[tuple[int, bool]]:
    """(elements, takes weight decay) of every trainable tensor, in the model's order."""
    h, i, d = arch.hidden_size, arch.intermediate_size, arch.dim_per_head
    q, kv = arch.num_attention_heads * d, arch.num_kv_heads * d
    yield arch.embedding_params, True
    for _ in range(arch.num_layers):
        for out in (q, kv, kv):
            yield h * out, True
            if arch.qkv_bias:
                yield out, False
        yield q * h, True
        if arch.qk_norm:
            yield d, False
            yield d, False
        yield h * i, True
        yield h * i, True
        yield i * h, True
        yield h, False
        yield h, False
    yield h, False
    if not arch.tie_word_embeddings:
        yield arch.embedding_params, True


def _split(sizes: list[int], limit: int) -> list[int]:
    if sum(sizes) <= limit:
        return [sum(sizes)] if sizes else []
    groups, current = [], 0
    for size in sizes:
        current += size
        if current >= limit:
            groups.append(current)
            current = 0
    if current:
        groups.append(current)
    return groups


def sub_group_elements(arch: ModelArch, world: int, limit: int = SUB_GROUP_ELEMENTS) -> list[int]:
    """Elements of each optimizer sub-group one ZeRO-3 rank holds (full-parameter training)."""
    tensors = list(_tensors(arch))
    decay = [ceil(n / world) for n, decays in tensors if decays]
    no_decay = [ceil(n / world) for n, decays in tensors if not decays]
    return _split(decay, limit) + _split(no_decay, limit)
