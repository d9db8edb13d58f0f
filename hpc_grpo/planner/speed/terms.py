"""One function per part of a GRPO step, in seconds per optimizer step of one rank.

Assumptions (each constant's source; "fitted" means chosen so that the calibration table of
tests/unit/planner/test_speed_calibration.py, built from docs/results/*.json and the
measurements that exist only in markdown, is met within 20 % except for the cases that test
lists as misses, with their reasons; the fit is by hand, round numbers, over a small grid
of the constants named below in session 34):

* Generation decodes ``completion_length`` tokens for the engine's whole batch at once. A
  decode step takes the longer of its host work and its GPU work, which overlap (session 34
  refit; the sum before): host work is a fixed DECODE_STEP_S (scheduler, sampling, kernel
  launches) plus DECODE_SEQ_S per sequence of the batch; GPU work is the bf16 weights of the TP
  shard read at DECODE_BW_FRACTION of the card's memory bandwidth, 2·params/TP FLOPs per
  sequence at DECODE_FLOP_FRACTION of the bf16 peak, and the TP all-reduces. What made the
  change: at 7B on 2 x H100 (session 33) TP 1 generated 32 sequences at 6.5 ms a token, close
  to the weights' read alone (the built-in 6.64B shape's 13.3 GB in 6.5 ms: 0.61 of 3.35
  TB/s), so the host's 4 ms cannot be added to it (the model reads at DECODE_BW_FRACTION 0.8
  and reaches 5.82 ms with the FLOP term, 10 % under that measurement);
  at 1.5B the host's share dominates (1.5B, 32 sequences: 3.5-4.4 ms a token on 2 x H100,
  3.1-4.1 on 2 x H200, TRL's generate_s in the 2026-11-26 bench files), which sets
  DECODE_STEP_S: H100 4.1 ms, H200 2.8 ms. With DECODE_SEQ_S the model's host cost for 32
  sequences on an H100 is 4.74 ms a token, above that range: 4.1 ms is what the 2026-11-25
  row 'h100 1.5B colocate TP1xDP2' needs (at 3.5 ms it misses by 25 %), so the later H100
  loans' 1.5B generation is predicted high. Two loans of 2 x H100 disagree (the 2026-11-25
  loan generated 32 sequences in 1.26 s, ../shared/design/gpu-facts-2026-11-25.md); the
  calibration test lists the rows of either loan it misses (MISSES there).
  TP > 1 adds two all-reduces per layer per token at TP_COLLECTIVE_S each, times log2(TP)
  (fitted at TP 2 only: 7B TP 2 generated 64 sequences at 7.3 ms a token against TP 1's 6.5
  ms for 32, session 33; session 34's loan ran the same at 5.1 ms a token, and the model's
  1.715 s is 30 % over that run's 1.318 s of generation; 3e-4 s before, fitted to a 0.5B
  step-time ratio, which made 7B's TP 2 generation 6.4 s against 1.9 measured. The
  log2 growth with the group's size is an assumption: no TP 4 or 8 run has been measured here).
* Training: 6·params·tokens FLOPs (4·params·tokens with LoRA: no weight gradients of the
  frozen base), plus one forward of 2·params·tokens for the old log-probabilities TRL computes
  while preparing inputs, at TRAIN_FLOP_FRACTION of the bf16 peak, halved at TRAIN_HIDDEN_HALF
  (fitted on 1.5B and 7B one-GPU runs, docs/results/2026-11-24-memory-phases-*.json, and the
  2026-11-26 1.5B layouts: 0.45 before the 2026-11-26 refit, 0.65 after, 0.75 since session
  34's, whose gathers hide behind it; STEP_S 0.20 -> 0.15 -> 0.25: the server-mode trainer
  trains 64 sequences in about 0.73 s of its step against 0.48 for 32 colocated, so less of
  the step is per token than 0.45 said).
  Gradient checkpointing recomputes each layer's forward in the backward: 2·params·tokens
  FLOPs counted RECOMPUTE_COST times (RECOMPUTE_COST = 2, fitted; 1, the bare FLOPs, before the
  refit). Measured at 1.5B on 2 x H200 (2026-11-26, one pair per ZeRO stage, same machine):
  ZeRO-2 1.449 s/step with recomputation against 1.253 and 1.285 without (0.16-0.20 s), ZeRO
  off 1.727 against 1.267 (0.46 s, of which 0.25 s is in generate_s, which recomputation does
  not run: not fitted); the model says 0.10 s. A larger RECOMPUTE_COST would follow the ZeRO-2
  pair but push the server-mode cases (which train with recomputation) past 20 %. At 0.5B
  (2026-11-23) the run without recomputation was the slower, 1.269 against 1.169, with input
  preparation 17 % slower too (machine drift, docs/benchmarks.md): held, at -17 %.
* Data-parallel exchange over the slowest link crossed, at the link's bus bandwidth:
  DDP (ZeRO off) all-reduces the fp32 gradients (the model trains in fp32 under autocast);
  ZeRO-2 reduce-scatters bf16 gradients each micro-step and all-gathers the updated bf16
  weights once (2 x bf16 params at two ranks: "3.1 GB over a link measured at 2.68 GB/s",
  docs/benchmarks.md 2026-11-23); ZeRO-3 also all-gathers every layer's weights for each
  forward and backward, counted once more with gradient checkpointing (its recomputed forward),
  and for the old log-probabilities' forward and the weight sync's gather, in layer-sized pieces
  at ZERO3_LINK_FRACTION of the link. The extra gather is a fitted count, not a traced one:
  DeepSpeed may keep a layer's weights gathered from the recomputed forward to its backward
  (stage3_max_reuse_distance, not set by the project), which would leave only the rest of the
  difference to explain. Fitted (1.0, was 0.65 with no extra gather) to 2 nodes, 1.5B ZeRO-3:
  with recomputation over 2.68 GB/s
  (docs/results/2026-11-23-multinode-reference.json, H200; 5.38 s/step on H100, gpu-facts)
  and without it over 2.152 GB/s, the link doctor measured on that loan
  (2026-11-26-multinode-reference-h100x2-second-loan.json, 4.119 s/step).
  Inside a node the link is not what limits ZeRO-3: each gather pass (a forward, a backward)
  takes at least ZERO3_FETCH_S_PER_LAYER per layer, DeepSpeed's fetch and release of every
  parameter through its hooks (fitted, 10 ms: 7B TP 2 on 2 x H100, 8 sequences of 96 tokens,
  spent 0.35 s in the loss's forward, a pass whose compute is about 0.02 s). The gathers run
  ahead of the layers (DeepSpeed's prefetch), so the training passes' gathers hide behind the
  training compute and only what exceeds it is added (the weight sync's gather runs between
  training and the next generation, with nothing to hide behind, and counts whole): at 64
  completions of 256 tokens the 7B loss forward took 0.29-0.39 s, its compute alone about
  0.25 (sessions 33 and 34, docs/benchmarks.md;
  2026-11-26-bench-two-7b-layouts-h100x2-session34.json). Across the sandbox's socket link the
  bandwidth term is the larger, so the floor changes nothing there; the overlap still does:
  the gathers there outlast the whole training compute, which disappears under them (the 2-node
  1.5B ZeRO-3 prediction on H200 went from 4.282 s/step at 69d180a to 4.240 at 4b2cff1,
  measured 4.622: the compute's 0.042 s gone, whatever TRAIN_FLOP_FRACTION is).
* Optimizer: GPU Adam streams 28 bytes per trainable parameter of the rank's shard (read
  weights, gradients, m, v; write weights, m, v) at half the memory bandwidth. CPU Adam
  (optimizer offload) moves bf16 gradients down and bf16 weights up over PCIe and updates at
  CPU_ADAM_S_PER_PARAM, plus OFFLOAD_STEP_S of DeepSpeed's per-step offload work (both fitted:
  1.5B ZeRO-3 + offload 3.03 s against 0.50 s without, docs/results/2026-11-24-memory-offload-
  1.5b-h200.json and -memory-phases-1.5b-h200.json; 7B 10.16 against 3.23 s, issue #30; 7B
  on 2 x H100 with one trainer rank and with two, session 33: 1.4 s and 0.7 ns before, which
  put both of session 33's offload layouts 26-30 % over). The host's CPUs set these figures and
  the model does not know them: the one-H200 machine and the 2 x H100 machine differ.
  Parameter offload fetches the bf16 weights over PCIe for each forward and backward.
* Weight sync to the colocated engine: SYNC_STEP_S plus the bf16 weights of the TP shard at
  SYNC_GBS (fitted: 0.04 s at 0.5B, 0.06 s at 1.5B, 0.13 s at 7B, the phases_s above).
  Server mode's push to `vllm serve`: SERVER_PUSH_S plus the bf16 weights at SERVER_PUSH_GBS or
  the link, whichever is slower (0.12 s at 0.5B on H200, 0.235 s at 1.5B on H100,
  ../shared/design/gpu-facts-2026-11-25.md and the 2026-11-23 bench file).
* Sleep mode: releasing and re-mapping vLLM's budget every step, SLEEP_STEP_S plus
  SLEEP_S_PER_GIB per GiB of it (an assumption of the right order: cuMemMap/unmap at about
  1 ms/GiB; the one-GPU runs in docs/benchmarks.md could not separate it from noise).
* Server mode's trainer, 1.5B on 2 x H200, one host: 2.279 s/step on 2026-11-23 (the GPU
  sandbox's Slurm node: a network namespace, 16 CPUs, launched by srun;
  2026-11-23-bench-multinode.json) against 1.768, 1.851 and 1.829 on 2026-11-26 (the host
  itself, bench_gpu.py two). Same stack, same engine and batch; the difference is in
  generate_s (1.38 s against 0.93-1.01): why is not measured. Both are held: the model predicts
  2.06 s, -10 % of the first and +12..+17 % of the others. Not held: the 2026-11-26
  'server_expandable' runs (1.986, 2.413 s: PYTORCH_CUDA_ALLOC_CONF=expandable_segments,
  which the runtime no longer sets, each the first run of its call with cold compile caches).
* Every step also pays STEP_S of rewards, logging and Python (fitted: 0.15 s before the
  session 34 refit, 0.25 s after).
"""

from __future__ import annotations

from math import log2

from hpc_grpo.planner.speed.hardware_figures import PCIE_GBS, Card

GB = 1e9
DECODE_STEP_S = {"H100": 4.1e-3, "H200": 2.8e-3}
DECODE_SEQ_S = 2.0e-5
DECODE_BW_FRACTION = 0.8
DECODE_FLOP_FRACTION = 0.5
TP_COLLECTIVE_S = 6.0e-5
TRAIN_FLOP_FRACTION = 0.75
TRAIN_HIDDEN_HALF = 450
RECOMPUTE_COST = 2.0
ZERO3_LINK_FRACTION = 1.0
ZERO3_FETCH_S_PER_LAYER = 0.010
CPU_ADAM_S_PER_PARAM = 0.6e-9
OFFLOAD_STEP_S = 0.9
SYNC_STEP_S = 0.03
SYNC_GBS = 140.0
SERVER_PUSH_S = 0.0
SERVER_PUSH_GBS = 21.0
SLEEP_STEP_S = 0.05
SLEEP_S_PER_GIB = 0.002
STEP_S = 0.25


def decode_s(card: Card, params: int, layers: int, seqs: int, tokens: int, tp: int) -> float:
    """One engine decoding ``tokens`` tokens for ``seqs`` sequences at once: a decode step
    takes the longer of its host work and its GPU work, which overlap."""
    weights = 2 * params / tp / (card.memory_tbs * 1e12 * DECODE_BW_FRACTION)
    flops = seqs * 2 * params / tp / (card.bf16_tflops * 1e12 * DECODE_FLOP_FRACTION)
    collectives = 2 * layers * TP_COLLECTIVE_S * log2(tp)
    host = DECODE_STEP_S[card.kind] + seqs * DECODE_SEQ_S
    return tokens * max(host, weights + flops + collectives)


def train_flops(params: int, tokens: int, checkpointing: bool, lora: bool) -> float:
    """Forward, backward, recomputation (RECOMPUTE_COST forwards) and the old log-probabilities'
    forward."""
    per_token = 2 + (2 if lora else 4) + (2 * RECOMPUTE_COST if checkpointing else 0) + 2
    return per_token * params * tokens


def compute_s(card: Card, flops: float, hidden: int) -> float:
    """Smaller layers reach less of the peak: the fraction is halved at TRAIN_HIDDEN_HALF."""
    fraction = TRAIN_FLOP_FRACTION * hidden / (hidden + TRAIN_HIDDEN_HALF)
    return flops / (card.bf16_tflops * 1e12 * fraction)


def exchange_s(zero: int, params: int, trainable: int, world: int, link_gbs: float,
               micro_steps: int, generations: int, *, checkpointing: bool,
               layers: int, overlap_s: float) -> float:
    """The data-parallel collectives of one optimizer step (0 at world size 1); ZeRO-3 gathers
    each layer's weights again for the recomputed forward of gradient checkpointing. ZeRO-3's
    gathers run ahead of the layers that need them (DeepSpeed's prefetch), so only what
    exceeds ``overlap_s``, the training compute they hide behind, is added to the step; the
    weight sync's gather runs between training and the next generation, with no compute to
    hide behind, and counts whole. (Hiding it too, as session 34's refit did, changed no
    calibration case: in all of them the training gathers alone exceed the compute; in the 7B cases of 64
    completions by 5 ms, 1.120 s against 1.115.)"""
    if world == 1:
        return 0.0
    share = (world - 1) / world
    if zero == 0:  # DDP: all-reduce of fp32 gradients per micro-step
        return micro_steps * 2 * share * 4 * trainable / (link_gbs * GB)
    scatter = micro_steps * share * 4 * trainable / (link_gbs * GB)  # fp32 gradients
    if zero < 3 or trainable < params:  # ZeRO-2 (LoRA keeps the base whole)
        return scatter + share * 2 * trainable / (link_gbs * GB)
    per_micro = 3 if checkpointing else 2  # forward, (recomputed forward,) backward
    training_gathers = per_micro * micro_steps + generations  # and the old logps' forward
    gather = max(share * 2 * params / (link_gbs * GB * ZERO3_LINK_FRACTION),
                 layers * ZERO3_FETCH_S_PER_LAYER)
    # the weight sync's gather, after training and before each generation round, hides behind nothing
    return scatter + max(0.0, training_gathers * gather - overlap_s) + generations * gather


def adam_gpu_s(card: Card, shard_params: float) -> float:
    return 28 * shard_params / (card.memory_tbs * 1e12 * 0.5)


def offload_s(shard_params: float, params_offloaded: bool, params: int, micro_steps: int) -> float:
    """CPU Adam with its PCIe traffic; parameter offload's fetches for forward and backward."""
    seconds = OFFLOAD_STEP_S + CPU_ADAM_S_PER_PARAM * shard_params
    seconds += 2 * 2 * shard_params / (PCIE_GBS * GB)
    if params_offloaded:
        seconds += micro_steps * 2 * 2 * params / (PCIE_GBS * GB)
    return seconds


def sync_s(params: int, tp: int) -> float:
    return SYNC_STEP_S + 2 * params / tp / (SYNC_GBS * GB)


def server_push_s(params: int, link_gbs: float) -> float:
    return SERVER_PUSH_S + 2 * params / (min(link_gbs, SERVER_PUSH_GBS) * GB)


def sleep_s(budget_gib: float) -> float:
    return SLEEP_STEP_S + SLEEP_S_PER_GIB * budget_gib
