"""Per-GPU memory of one layout of a colocated GRPO job (TRL + DeepSpeed + vLLM in every rank).

Assumptions, each a round number on purpose (GiB = 2**30 bytes):

* Training runs in bf16 with DeepSpeed: 2 B/param of weights, 4 B/param of fp32 gradients and
  12 B/param of Adam state (fp32 master copy, m, v). Without DeepSpeed (ZeRO stage 0) the model
  stays as TRL 1.16 loads it, fp32 (its default when model_init_kwargs sets no dtype), under bf16
  autocast: 4 B/param of weights that are their own master copy, 4 of gradients, 8 of m and v.
  ZeRO-2 shards gradients and Adam state over all ranks (nodes × gpus_per_node); ZeRO-3 shards
  the weights too and gathers two layers (or the embedding) at a time. Optimizer offload moves
  Adam state and fp32 gradients to CPU memory; parameter offload (ZeRO-3 only) moves the
  weights as well.
* LoRA: adapters of the recipe's rank (lora_r) on its lora_target_modules (every linear layer
  when none are named: the most memory) train, in fp32 with fp32 gradients and Adam state; the
  frozen base stays whole on every GPU, because TRL gathers the full model to merge adapters
  before each weight sync, and it is the reference model too (adapters off).
* Activations, with and without recomputation, and the allocator's cache of them: activations.py.
  TRL 1.16 fuses the lm head with the log-softmax in tiles: one fp32 tile of 4096 tokens × vocab.
* vLLM holds gpu_memory_utilization × GPU memory: its bf16 weights split over TP ranks, a KV
  cache big enough for every sequence of the generation batch at full length, and the rest as
  runtime margin. The planner's value is (weights + KV)/GPU + 0.05, rounded up to 0.05, in
  [0.1, 0.9]; below the largest valid TP it must stay <= 0.5 (half the GPU for training), as a
  larger TP also speeds up decoding, which reads every weight per token.
* Every GPU also holds 3 GiB of CUDA context, NCCL and CUDA-graph memory (+0.5 with TP > 1,
  +0.5 across nodes), and 10 % of the GPU is kept free for allocator fragmentation.
* Colocated phases: without sleep mode vLLM's whole budget stays resident during training. With
  sleep mode (level 2) it is released, so the peak is max(training, generation + the training
  state that stays resident: weights, optimizer state, reference model, and gradients under
  DeepSpeed; plain PyTorch frees them after each step and TRL empties the cache before waking
  the engine). Without DeepSpeed the fp32 weights train under bf16 autocast, which keeps a bf16
  copy of every trainable weight for the forward and backward: 2 B/param more while training.
  Measured (2026-11-24, H200, NVML per phase, docs/results/2026-11-24-memory-phases-*.json):
  the 7B shape trained at 112.4 and generated at 99.4 GiB, where counting the gradients in
  generation and no autocast copies had planned 102.6 and 123.0.
* With offload, the node's CPU memory (host.py: each rank's process and offloaded state, with
  DeepSpeed's pinned buffers) must fit in 80 % of the node's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from hpc_grpo.planner.memory.activations import activations_gib, cache_gib, sequence_length
from hpc_grpo.planner.memory.host import host_gib
from hpc_grpo.planner.memory.request import PlanRequest

__all__ = ["activations_gib", "cache_gib", "sequence_length"]  # re-exported

GIB = float(2**30)
RESERVE_FRACTION = 0.10
VLLM_MARGIN = 0.05
UTIL_STEP = 0.05
UTIL_MIN, UTIL_MAX, UTIL_SHARE = 0.10, 0.90, 0.50
CPU_USABLE_FRACTION = 0.80
LM_HEAD_TILE_TOKENS = 4096
ZERO2_BUCKET_ELEMENTS = 5 * 10**8


@dataclass(frozen=True)
class Layout:
    tp: int
    zero: int
    offload_optimizer: bool = False
    offload_params: bool = False
    sleep: bool = False


@dataclass(frozen=True)
class Estimate:
    """A layout's memory per GPU, in GiB; ``problem`` is empty when it fits."""

    layout: Layout
    util: float
    items: tuple[tuple[str, float], ...]
    training: float
    generation: float
    training_without_sleep: float
    host_per_node: float
    problem: str

    @property
    def fits(self) -> bool:
        return not self.problem

    def gib(self, item: str) -> float:
        return dict(self.items).get(item, 0.0)


def max_num_seqs(req: PlanRequest, tp: int) -> int:
    """TRL's value: the completions one TP group generates per generation step."""
    return req.per_device_train_batch_size * tp * req.generation_steps


def vllm_need(req: PlanRequest, tp: int) -> tuple[float, float]:
    """(weights, KV cache) GiB per GPU for vLLM at this TP."""
    weights = 2 * req.arch.num_params / tp / GIB
    kv = req.arch.kv_bytes_per_token * sequence_length(req) * max_num_seqs(req, tp) / tp / GIB
    return weights, kv


def planned_util(need_gib: float, gpu_gib: float) -> float:
    """need/GPU + margin, rounded up to a 0.05 step, at least 0.1 (the caller checks the top)."""
    steps = ceil(round((need_gib / gpu_gib + VLLM_MARGIN) / UTIL_STEP, 6))
    return round(max(UTIL_MIN, steps * UTIL_STEP), 2)


def overhead_gib(req: PlanRequest, tp: int) -> float:
    return 3.0 + (0.5 if tp > 1 else 0.0) + (0.5 if req.nodes > 1 else 0.0)


@dataclass(frozen=True)
class _Training:
    """Bytes of training state one GPU holds under a layout, and how the state is sharded."""

    trainable: float
    weight_shards: int
    state_shards: int
    on_cpu_weights: bool
    weights: float
    grads: float
    optim: float
    reference: float
    buffers: float
    lm_head: float
    autocast: float


def _training_bytes(req: PlanRequest, layout: Layout) -> _Training:
    """Weights, gradients, Adam state, reference model, ZeRO buffers and the lm-head tile."""
    arch, world, params = req.arch, req.world_size, req.arch.num_params
    trainable = req.trainable_params
    weight_shards = world if layout.zero == 3 and not req.lora else 1
    state_shards = world if layout.zero >= 2 else 1
    on_cpu_weights = layout.offload_params and weight_shards > 1
    # Without DeepSpeed the weights stay as TRL loaded them, fp32 (pure_bf16: bf16, m and v too).
    pure = req.pure_bf16 and layout.zero == 0
    weight_bytes, adam_bytes = (2, 4) if pure else (4, 8) if layout.zero == 0 else (2, 12)
    weights = 0.0 if on_cpu_weights else weight_bytes * params / weight_shards
    if req.lora:
        weights += 4 * trainable  # fp32 adapters
    grads = 0.0 if layout.offload_optimizer else (2 if pure else 4) * trainable / state_shards
    optim = 0.0 if layout.offload_optimizer else adam_bytes * trainable / state_shards
    reference = (0.0 if req.beta == 0 or req.lora or on_cpu_weights
                 else weight_bytes * params / weight_shards)
    if weight_shards > 1:
        buffers = 2 * max(arch.layer_params, arch.embedding_params) * 2
    else:
        buffers = 2 * min(ZERO2_BUCKET_ELEMENTS, trainable) * 2 if layout.zero >= 2 else 0
    completion_tokens = req.per_device_train_batch_size * (sequence_length(req) - req.prompt_length)
    lm_head = min(completion_tokens, LM_HEAD_TILE_TOKENS) * arch.vocab_size * 4
    autocast = 2 * params if layout.zero == 0 and not req.lora and not pure else 0.0
    return _Training(trainable, weight_shards, state_shards, on_cpu_weights, weights, grads, optim,
                     reference, buffers, lm_head, autocast)


def _host_gib(req: PlanRequest, layout: Layout, t: _Training) -> float:
    """CPU memory per node with offload (host.py); 0 when nothing is offloaded."""
    if not (layout.offload_optimizer or t.on_cpu_weights):
        return 0.0
    return host_gib(req, layout.zero, layout.offload_optimizer, t.on_cpu_weights)


def _training_items(req: PlanRequest, t: _Training, zero: int) -> list[tuple[str, float]]:
    """The breakdown's training lines, in GiB."""
    items = [("training weights", t.weights / GIB), ("gradients", t.grads / GIB),
             ("optimizer states", t.optim / GIB)]
    if req.beta and not req.lora:
        items.append(("reference model", t.reference / GIB))
    return [*items, ("ZeRO buffers", t.buffers / GIB),
            ("activations", activations_gib(req, req.gradient_checkpointing)),
            ("lm head tile", t.lm_head / GIB), ("bf16 weight copies (autocast)", t.autocast / GIB),
            *((("allocator cache (no recomputation)", cache_gib(req, zero)),)
              if not req.gradient_checkpointing else ())]


def estimate(req: PlanRequest, layout: Layout, share: float = UTIL_MAX) -> Estimate:
    """Memory of one layout; ``share`` caps the planner's vLLM fraction (not an override's)."""
    gpu = req.gpu_memory_gib
    t = _training_bytes(req, layout)
    vllm_weights, kv = vllm_need(req, layout.tp)
    if req.vllm_gpu_memory_utilization is not None:
        util = req.vllm_gpu_memory_utilization
    else:
        util = planned_util(vllm_weights + kv, gpu)
    budget = util * gpu
    overhead, reserve = overhead_gib(req, layout.tp), RESERVE_FRACTION * gpu
    resident = (t.weights + (t.grads if layout.zero else 0.0) + t.optim + t.reference) / GIB
    if t.weight_shards == 1:
        resident += t.buffers / GIB  # ZeRO-2 buckets live as long as the engine
    train_only = (t.weights + t.grads + t.optim + t.reference + t.buffers + t.lm_head
                  + t.autocast) / GIB + (
        activations_gib(req, req.gradient_checkpointing)) + cache_gib(req, layout.zero)
    training_sleep = train_only + overhead + reserve
    training_awake = training_sleep + budget
    training = training_sleep if layout.sleep else training_awake
    generation = resident + budget + overhead + reserve
    host = _host_gib(req, layout, t)
    items = _training_items(req, t, layout.zero) + [
        ("vLLM weights per TP shard", vllm_weights),
        ("KV cache", kv),
        ("vLLM runtime margin", max(0.0, budget - vllm_weights - kv)),
        ("CUDA/NCCL overhead", overhead),
        ("fragmentation reserve", reserve),
        ("total during training", training),
        ("total during generation", generation),
    ]
    if host:
        items.append(("CPU memory per node", host))
    problem = _problem(req, util, share, vllm_weights + kv, training, generation, host)
    return Estimate(layout, util, tuple((name, round(value, 2)) for name, value in items),
                    training, generation, training_awake, host, problem)


def _problem(req: PlanRequest, util: float, share: float, need: float, training: float,
             generation: float, host: float) -> str:
    gpu = req.gpu_memory_gib
    if req.vllm_gpu_memory_utilization is not None and util * gpu < need:
        return (f"vllm_gpu_memory_utilization {util} gives vLLM {util * gpu:.1f} GiB but its "
                f"weights + KV cache need {need:.1f} GiB")
    if req.vllm_gpu_memory_utilization is None and util > share:
        return (f"vLLM's weights + KV cache ({need:.1f} GiB) need gpu_memory_utilization "
                f"{util:.2f}, above {share:.1f}")
    if training > gpu:
        return f"training peaks at {training:.1f} GiB per GPU, above {gpu:g} GiB"
    if generation > gpu:
        return f"generation peaks at {generation:.1f} GiB per GPU, above {gpu:g} GiB"
    usable = CPU_USABLE_FRACTION * req.cpu_memory_gib_per_node
    if host > usable:
        return (f"offloaded state needs {host:.0f} GiB of CPU memory per node, above "
                f"{usable:.0f} GiB usable ({CPU_USABLE_FRACTION:.0%} of "
                f"{req.cpu_memory_gib_per_node:g})")
    return ""
