"""Host (CPU) memory per node of one layout: what the node's processes hold while training, each page once.

Assumptions (GiB = 2**30 bytes; "N" the model's parameters, "p" one rank's share of the trainable
ones: trainable / world under ZeRO-2/3, all of them otherwise):

* Each rank's process (torch, CUDA, NCCL, vLLM and their libraries, its inductor compile workers,
  the node task and torchrun beside it) holds RANK_PROCESS_GIB, plus LOAD_SHARE of the weights as
  the rank loaded them (fp32 without DeepSpeed, bf16 with it; under ZeRO-3 the rank's partition,
  as transformers builds the model inside DeepSpeed's zero.Init). Fitted on what the node lost,
  each page counted once (MemTotal - MemAvailable over the run, agreeing with the ranks' own RSS
  to 1.4 GiB), in two runs with optimizer offload and 2 ranks on one 2 x H200 node (2026-11-26,
  docs/results/2026-11-26-memory-offload-1.5b-2ranks-split-h200x2.json: 36.44 GiB, implied
  3.98 GiB a rank; ...-7b-2ranks-h200x2.json: 129.81 GiB, implied 2.69): the model says 36.46
  and 132.4 (+0 %, +2 %). Rounded up, so the plan errs high.
  The constant was 8 GiB before: fitted on the RSS summed over the process tree, which counts the
  ~0.36 GiB image of every forked inductor compile worker (about one per core and rank: 66 of
  them, 25 GiB of the 61.0 GiB sum, on the 32-core machine) although the node holds it once.
  Every earlier saved run was measured that way (tests/unit/planner/test_host_memory.py holds
  them as upper bounds). Checked since on runs it was not fitted to, 1 rank on 2 x H100
  (2026-11-26): 1.5B, the tree's PSS 29.89 GiB, the node 30.7, the model 30.5; 7B, the rank's own
  peak RSS 120.8 GiB (a lower bound of the node, which showed 122 GiB used while saving; the
  run's sampler was cut off), the model 126.4 (128.4 before subgroups.py counted the pinned
  sub-groups, matched to the 42.0 GiB that run's pinned allocator held). The whole 7B run again
  (session 32, ...-7b-1rank-h100x2.json): the node lost 122.55 GiB at its peak, the tree's PSS
  121.88, the model 126.43 (+3.2 %; the sub-group count was set on the first run's pinned
  figure, the node total was not). Not measured per page: any run without offload.
* Optimizer offload, per rank, from DeepSpeed 0.19's code (runtime/zero/stage3.py,
  stage_1_and_2.py, with the pin_memory the runtime sets, runtime/rank/grpo_args.py): the fp32
  master partition (4 B/p) and Adam's m and v (8 B/p); under ZeRO-3 a pinned fp32 gradient
  buffer per optimizer sub-group (about 1e9 elements each, subgroups.py counts them from the
  model's tensors for full-parameter training) and one pinned flat gradient
  buffer in bf16 (2 B/p; the gradient accumulation dtype is the model's under ZeRO); under
  ZeRO-1/2 the master partition itself, a bf16 copy (2 B/p) and the fp32 gradients (4 B/p), all
  pinned. torch's pinned allocator rounds every block up to a power of two
  (CachingHostAllocator), so a pinned buffer of 5.1 GiB holds 8. 1.5B ZeRO-3 + offload, 1 rank
  on a 16-core H200: RSS sum 34.78 GiB (2026-11-24-memory-offload-1.5b-h200.json, compile
  workers included); the model now says 30.5 (with 8 GiB a rank it said 34.5; 16 B/p + 4 GiB a
  rank, the plan before that, said 24.3).
* Parameter offload (ZeRO-3): the bf16 weights, and the reference model's, in CPU memory,
  unpinned (not measured).
* Not counted here: the save's host memory (checkpoint_size.py adds it on rank 0's node) and a
  resume's load of the checkpoint (measured: 1.5B ZeRO off 19.5 GiB against 14.7 for a fresh
  start; 7B ZeRO-3 2 ranks 103.4 against 42.6: each rank's optimizer file is read into CPU
  memory).
* Offload measured since (2 x H200, 2026-11-26): 7B, 1 rank, RSS sum 132.57 GiB
  (docs/results/2026-11-26-memory-offload-7b-h200x2.json; its 32-core machine's compile workers
  included). The pinned buffers above were seen exactly in the 2-rank runs: torch's pinned
  allocator held 6.0 GiB a rank at 1.5B and 22.0 at 7B (metrics.jsonl ``host_mem_gib``), as
  ``offloaded_bytes`` rounds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil, log2

from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory.subgroups import SUB_GROUP_ELEMENTS, sub_group_elements

GIB = float(2**30)
RANK_PROCESS_GIB = 4.0
LOAD_SHARE = 0.5


def pinned(nbytes: float) -> float:
    """Bytes torch's pinned-memory allocator takes for a block: the next power of two."""
    return float(2 ** ceil(log2(nbytes))) if nbytes >= 1 else 0.0


def offloaded_bytes(zero: int, p: float, groups: Sequence[float] | None = None) -> float:
    """Bytes one rank holds in CPU memory for its p offloaded trainable parameters; under ZeRO-3
    ``groups`` are its optimizer sub-groups' elements (subgroups.py), else whole 1e9 element
    groups and a remainder (adapters, whose tensors the planner does not list)."""
    if p <= 0:
        return 0.0
    if zero == 3:
        if groups is None:
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
        groups = sub_group_elements(req.arch, req.world_size) if zero == 3 and not req.lora else None
        per_rank += offloaded_bytes(zero, req.trainable_params / state_shards, groups)
    if params_on_cpu:
        per_rank += 2 * req.arch.num_params / req.world_size * (2 if req.beta and not req.lora else 1)
    return req.gpus_per_node * per_rank / GIB
