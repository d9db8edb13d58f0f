"""How big a checkpoint is on disk, and how much host memory saving one takes.

Assumptions, each from what transformers 5.x / TRL 1.16 / DeepSpeed 0.19 write for one
``checkpoint-<step>`` (Trainer._save_checkpoint: save_model, then optimizer, scheduler and RNG
states, then trainer_state.json; older checkpoints are rotated away only after the new one is
complete, so save_total_limit + 1 exist while the next is written):

* ZeRO off (no DeepSpeed): the model stays as TRL loads it, fp32 unless the job sets a dtype
  (planner/memory/estimate.py), and those weights are their own master copy: ``model.safetensors`` holds
  4 B/param, ``optimizer.pt`` AdamW's m and v in the weights' dtype, 8 B/trainable param. Both
  are what an exact resume needs; nothing is redundant. Measured on the tiny model
  (docs/results/checkpoint-size-cpu.json, tests/unit/planner/test_checkpoint_size.py).
* ZeRO-1/2 (DeepSpeed, bf16 on GPUs, fp32 on CPU): DeepSpeed's ``mp_rank_00_model_states.pt``
  with the module's weights in that dtype (2 B/param) and one optimizer file per rank holding
  the fp32 master partition and Adam's m and v (12 B/trainable param in all). transformers
  would also write ``model.safetensors``, the same weights again (2 B/param, a tied embedding
  twice: measured on builtin:tiny, docs/results/2026-11-24-ckpt-tiny-cpu.json), which a resume
  under DeepSpeed never reads; full-parameter checkpoints leave it out
  (runtime/rank/checkpoints/deepspeed_save.py; re-measured 2026-11-28, the ``zero2`` layout of that JSON).
* ZeRO-3: the module states hold placeholders only (parameter shapes, buffers: 14 KiB a rank
  for builtin:tiny, 16 KiB allowed); the optimizer files hold 12 B/trainable param.
  No ``model.safetensors``: the runtime never sets ``stage3_gather_16bit_weights_on_model_save``
  (runtime/rank/setup/grpo_args.py), so a full-parameter checkpoint holds DeepSpeed's files, what an
  exact resume needs; ``hpc-grpo export`` writes the model (tiny, re-measured 2026-11-28: the
  ``zero3`` layout of the JSON above). LoRA's adapter file is gathered by transformers.
  (``save_only_model``, a checkpoint without optimizer state, is refused: config/recipe_format.py.)
* LoRA: the model file is the adapter only (fp32 without DeepSpeed, 4 B per adapter param;
  DeepSpeed skips frozen weights), optimizer state covers the adapters alone.
* Small files: scheduler.pt, trainer_state.json, config, tokenizer: 32 MiB allowance; one RNG
  file per rank (about 16 KiB).
* Host memory of a save, on the node of rank 0: safetensors builds each shard's bytes in memory
  before writing (at most transformers' 5 GB ``max_shard_size``, or the whole file if smaller);
  a ZeRO-3 gather first holds the full 16-bit state dict on the CPU; torch.save streams tensor
  by tensor (one largest tensor, ignored). Not yet compared with a measured peak on a 7B save.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(2**30)
SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size for save_pretrained
SMALL_FILES_BYTES = 32 * 2**20
RNG_BYTES_PER_RANK = 16 * 2**10
ZERO3_MODULE_BYTES_PER_RANK = 16 * 2**10  # placeholders' shapes and the buffers
ADAM_STATE_BYTES = 8  # m and v, fp32, per trainable parameter (their dtype without DeepSpeed)
DS_OPTIM_BYTES = 12  # fp32 master copy, m and v per trainable parameter under DeepSpeed


@dataclass(frozen=True)
class CheckpointRequest:
    num_params: int
    trainable_params: int
    zero_stage: int
    offload_optimizer: bool
    lora: bool
    device: str  # "cuda": bf16 under DeepSpeed; "cpu": fp32 throughout
    world_size: int
    save_total_limit: int | None  # None: TRL keeps every checkpoint
    weight_bytes: int = 4  # the dtype the model is loaded in, used without DeepSpeed


@dataclass(frozen=True)
class CheckpointSize:
    """One checkpoint's files in bytes, how many exist at once, and the save's host memory."""

    items: tuple[tuple[str, int], ...]
    at_once: int | None  # save_total_limit + 1; None: unbounded
    host_bytes: int
    partitioned: int = 0  # of ``one``, the bytes every rank writes an equal part of (the rest: rank 0)

    @property
    def one(self) -> int:
        return sum(b for _, b in self.items)

    @property
    def peak_disk(self) -> int | None:
        return None if self.at_once is None else self.one * self.at_once


def size_checkpoint(req: CheckpointRequest) -> CheckpointSize:
    """The files of one checkpoint and the host memory its save needs (assumptions above)."""
    trainable = req.trainable_params
    items: list[tuple[str, int]] = []
    if req.zero_stage == 0:
        model = req.weight_bytes * (trainable if req.lora else req.num_params)
        optimizer = ADAM_STATE_BYTES * req.weight_bytes // 4 * trainable
        items += [("model weights (own master copy)", model), ("optimizer (Adam m, v)", optimizer)]
        host = min(model, SHARD_BYTES)
        partitioned = 0  # DDP: rank 0 writes the model and the optimizer
    else:
        dtype = 2 if req.device == "cuda" else 4
        saved = trainable if req.lora else req.num_params
        # full parameters resume from DeepSpeed's files alone (runtime/rank/checkpoints/deepspeed_save.py);
        # LoRA's adapter file is written beside them
        model = dtype * saved if req.lora else 0
        module = dtype * saved if req.zero_stage < 3 else \
            ZERO3_MODULE_BYTES_PER_RANK * req.world_size
        optimizer = DS_OPTIM_BYTES * trainable
        items += [("model weights (safetensors)", model),
                  ("DeepSpeed module states", module),
                  ("DeepSpeed optimizer (fp32 master, m, v)", optimizer)]
        host = min(model, SHARD_BYTES) + (model if req.zero_stage == 3 else 0)
        # each rank writes its optimizer partition (and under ZeRO-3 its module placeholders);
        # ZeRO-1/2's module states and the model file are rank 0's
        partitioned = optimizer + (module if req.zero_stage == 3 else 0)
    items.append(("scheduler, trainer state, RNG, tokenizer",
                  SMALL_FILES_BYTES + RNG_BYTES_PER_RANK * req.world_size))
    at_once = None if req.save_total_limit is None else req.save_total_limit + 1
    return CheckpointSize(tuple(items), at_once, host,
                          partitioned + RNG_BYTES_PER_RANK * req.world_size)


def busiest_node_bytes(size: CheckpointSize, world_size: int, procs_per_node: int) -> int:
    """What the first node writes of one checkpoint: its ranks' parts of the partitioned files
    and rank 0's own (the model file, ZeRO-1/2's module states, the small files)."""
    share = size.partitioned * min(procs_per_node, world_size) // max(world_size, 1)
    return share + size.one - size.partitioned


def gib(value: float) -> str:
    """A size for one line: GiB, or MiB below one GiB (a tiny model's checkpoint)."""
    return f"{value / GIB:.1f} GiB" if value >= GIB / 10 else f"{value / 2**20:.1f} MiB"


def disk_verdict(size: CheckpointSize, free_bytes: int, where: str) -> tuple[str, str]:
    """(problem, warning) for the output file system: a problem when not even one checkpoint
    fits, a warning when the checkpoints kept at once do not (with the limit that fits)."""
    one = size.one
    if one > free_bytes:
        return (f"one checkpoint needs {gib(one)} but {where} has {gib(free_bytes)} free: "
                "no save can complete", "")
    peak = size.peak_disk
    kept = free_bytes // one if one else 0
    if peak is None:
        return "", (f"save_total_limit unset: checkpoints of {gib(one)} each are all kept; "
                    f"{where} has room for {kept} ({gib(free_bytes)} free)")
    if peak > free_bytes:
        limit = max(kept - 1, 0)
        fix = f"set save_total_limit={limit}" if limit else "free space first"
        return "", (f"{size.at_once} checkpoints of {gib(one)} exist at once while the next is "
                    f"written ({gib(peak)}) but {where} has {gib(free_bytes)} free: later saves "
                    f"will be skipped; {fix}")
    return "", ""


# Kept free when the plan sizes save_total_limit: a shared file system's other writers, the run's
# logs and metrics, a checkpoint a little larger than estimated (the 7B one was within 0.04%).
MARGIN_FRACTION = 0.05
MARGIN_MIN = 2**30


def margin(free_bytes: int) -> int:
    return max(MARGIN_MIN, int(free_bytes * MARGIN_FRACTION))


def size_limit(one: int, free_bytes: int, default: int, where: str) -> tuple[int, str]:
    """(save_total_limit, one line why) where the recipe leaves it unset: the most checkpoints
    kept such that they and the next one, while it is written, fit the free space less the
    margin; at most ``default``; 0 where not even two fit at once (the line says so)."""
    room = max(0, free_bytes - margin(free_bytes))
    fit = room // one if one else default + 1
    keep = max(0, min(default, fit - 1))
    head = (f"{fit} checkpoint(s) of {gib(one)} fit in {gib(room)} ({where}: "
            f"{gib(free_bytes)} free less a {gib(margin(free_bytes))} margin)")
    if keep < 1:
        return 0, (f"{head}: the newest complete checkpoint and the next while it is written "
                   f"need {gib(2 * one)}")
    why = "the default" if keep == default else "the most that fit beside the one being written"
    return keep, (f"save_total_limit: unset -> {keep} ({why}; plan: {head}; {keep + 1} at once "
                  f"while saving = {gib((keep + 1) * one)})")


def host_verdict(size: CheckpointSize, resident_gib: float, node_memory_gib: float) -> str:
    """A warning when the save's host memory on top of what training holds there exceeds the
    node's memory (the kernel's OOM killer ends the rank mid-save)."""
    need = resident_gib + size.host_bytes / GIB
    if node_memory_gib and need > node_memory_gib:
        return (f"saving a checkpoint needs {need:.0f} GiB of host memory on rank 0's node "
                f"({resident_gib:.0f} held while training + {gib(size.host_bytes)} for the save) "
                f"but the node has {node_memory_gib:g} GiB")
    return ""
