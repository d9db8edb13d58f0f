"""Host (CPU) memory per node of one layout: what the node's process tree holds (RSS) while training.

Assumptions (GiB = 2**30 bytes; "N" the model's parameters, "p" one rank's share of the trainable
ones: trainable / world under ZeRO-2/3, all of them otherwise):

* Each rank's process (torch, CUDA, NCCL, vLLM and their libraries, the node task and torchrun
  beside it) holds RANK_PROCESS_GIB, plus LOAD_SHARE of the weights as the rank loaded them (fp32
  without DeepSpeed, bf16 with it; under ZeRO-3 the rank's partition, as transformers builds the
  model inside DeepSpeed's zero.Init). Both fitted, not derived,
  on the peak RSS of the whole process tree (psutil, every 0.5 s; tests/gpu/test_checkpoint_resume
  HostPeak), less the save's host memory (planner/checkpoint_size.py), of three runs without
  offload: 0.5B (0.39 B params) ZeRO off, 1 rank on an H100, 9.73 GiB
  (docs/results/2026-11-24-generation-buffer-resume-h100.json, first attempt); 1.5B (1.36 B)
  ZeRO off, 1 rank on an H200, 14.68 GiB (2026-11-24-ckpt-1.5b-usr2-resume-h200.json, first
  attempt); 7B (6.64 B) TP 2 ZeRO-3, 2 ranks on one H100 node, 42.61 GiB
  (2026-11-25-7b-resume-stop-h100x2.json). The model: 10.2, 15.2 and 39.2 GiB (+5, +3, -8 %).
* Optimizer offload, per rank, from DeepSpeed 0.19's code (runtime/zero/stage3.py,
  stage_1_and_2.py, with the pin_memory the runtime sets, runtime/rank/grpo_args.py): the fp32
  master partition (4 B/p) and Adam's m and v (8 B/p); under ZeRO-3 a pinned fp32 gradient
  buffer per sub-group of at most 1e9 elements (sub_group_size) and one pinned flat gradient
  buffer in bf16 (2 B/p; the gradient accumulation dtype is the model's under ZeRO); under
  ZeRO-1/2 the master partition itself, a bf16 copy (2 B/p) and the fp32 gradients (4 B/p), all
  pinned. torch's pinned allocator rounds every block up to a power of two
  (CachingHostAllocator), so a pinned buffer of 5.1 GiB holds 8. Measured once: 1.5B ZeRO-3 +
  offload, 1 rank on an H200, 34.78 GiB (2026-11-24-memory-offload-1.5b-h200.json; the tree
  there includes pytest and the submitting CLI); the model: 34.5 (16 B/p + 4 GiB a rank, the
  plan before, said 24.3).
* Parameter offload (ZeRO-3): the bf16 weights, and the reference model's, in CPU memory,
  unpinned (not measured).
* Not counted here: the save's host memory (checkpoint_size.py adds it on rank 0's node) and a
  resume's load of the checkpoint (measured: 1.5B ZeRO off 19.5 GiB against 14.7 for a fresh
  start; 7B ZeRO-3 2 ranks 103.4 against 42.6: each rank's optimizer file is read into CPU
  memory).
* Offload measured since (2 x H200, 2026-11-26, tests/gpu/test_memory_phases.py -k offload):
  7B, 1 rank: 132.57 GiB against the model's 132.43 (-0.1 %,
  docs/results/2026-11-26-memory-offload-7b-h200x2.json). 1.5B with 2 ranks a node: 61.0 GiB
  in two runs against 44.5 (-27 %, ...-1.5b-2ranks-h200x2.json): 8.3 GiB a rank that the
  buffers above do not explain (not found; tests/unit/planner/test_host_memory.py holds it as a
  strict xfail). Not measured: 7B with 2 ranks a node (the model says 140.4 GiB).
"""

from __future__ import annotations

from math import ceil, log2

from hpc_grpo.planner.types import PlanRequest

GIB = float(2**30)
RANK_PROCESS_GIB = 8.0
LOAD_SHARE = 0.5
SUB_GROUP_ELEMENTS = 10**9  # DeepSpeed's default sub_group_size


def pinned(nbytes: float) -> float:
    """Bytes torch's pinned-memory allocator takes for a block: the next power of two."""
    return float(2 ** ceil(log2(nbytes))) if nbytes >= 1 else 0.0


def offloaded_bytes(zero: int, p: float) -> float:
    """Bytes one rank holds in CPU memory for its p offloaded trainable parameters."""
    if p <= 0:
        return 0.0
    if zero == 3:
        full, rest = divmod(p, SUB_GROUP_ELEMENTS)
        groups = [float(SUB_GROUP_ELEMENTS)] * int(full) + ([rest] if rest else [])
        return 12 * p + sum(pinned(4 * g) for g in groups) + pinned(2 * p)
    return pinned(4 * p) + pinned(2 * p) + pinned(4 * p) + 8 * p


def load_bytes(req: PlanRequest, zero: int) -> float:
    """The weights as one rank loads them: fp32 without DeepSpeed (unless pure bf16), else bf16;
    under ZeRO-3 (not LoRA) its partition only (zero.Init builds the model partitioned)."""
    shards = req.world_size if zero == 3 and not req.lora else 1
    return (2 if zero or req.pure_bf16 else 4) * req.arch.num_params / shards


def host_gib(req: PlanRequest, zero: int, offload_optimizer: bool, params_on_cpu: bool) -> float:
    """CPU memory per node while training (assumptions above), in GiB."""
    state_shards = req.world_size if zero >= 2 else 1
    per_rank = RANK_PROCESS_GIB * GIB + LOAD_SHARE * load_bytes(req, zero)
    if offload_optimizer:
        per_rank += offloaded_bytes(zero, req.trainable_params / state_shards)
    if params_on_cpu:
        per_rank += 2 * req.arch.num_params / req.world_size * (2 if req.beta and not req.lora else 1)
    return req.gpus_per_node * per_rank / GIB
