"""Which run layouts may continue at another world size, and the ZeRO conversion that allows it.

The one place of the rule (issue #60): the launcher's ``resume`` (planner/resume.py) refuses a
new world size by it, and the ranks (runtime/rank/checkpoints/universal.py) decide by it whether
the checkpoint they resume from must be converted first. Stdlib only, like the rest of rundir.

- DDP without ZeRO: nothing in the checkpoint is laid out per rank but the RNG states.
- DeepSpeed ZeRO-1/2/3: the optimizer's (and ZeRO-3's parameter) partitions are laid out for the
  saving data-parallel size. DeepSpeed's universal checkpoint re-lays them out:
  ``deepspeed.checkpoint.ds_to_universal`` writes each parameter's full fp32 weights and Adam
  states into ``<tag>_universal/zero/<name>/`` beside the checkpoint's ``<tag>`` folder and names
  it in ``latest_universal``; a DeepSpeed config with ``"checkpoint": {"load_universal": true}``
  then makes ``engine.load_checkpoint`` read that folder, each rank slicing its own partition
  for the new size. DeepSpeed 0.19.8 (the installed one) converts stage 1-2 through
  ``DeepSpeedCheckpoint`` and stage 3 through its own path; a transformers checkpoint carries no
  ``universal_checkpoint_info`` (Megatron clients write it), so ``--inject_missing_state`` is
  needed. Converted once per checkpoint; the folder is reused by later resumes.
- Server mode: refused (its vLLM server's nodes and the trainer's world size are planned
  together).

The batch split at the new size is here too (``split_batch``): the global batch (completions
per optimizer step) and the generation batch are kept, and the per-device batch and the
accumulation replanned. The launcher's ``resume --nodes`` applies it today; a node task that
finds its job started on fewer nodes than planned (``min_nodes``, issue #60) needs the same
rule without the launcher, so it lives below both.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Mapping
from math import ceil
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import RunRecord, world_size
from hpc_grpo.rundir.placement import rank_row

RESHARDED_ZERO_STAGES = (1, 2, 3)  # ds_to_universal's stages in DeepSpeed 0.19
UNIVERSAL_SUFFIX = "_universal"  # ds_to_universal's output beside the tag folder
LATEST_UNIVERSAL = "latest_universal"  # the tag file DeepSpeed's universal load reads
# Written into <tag>_universal/ after the conversion exited 0: a folder without it was left by
# a conversion killed half-way and is converted again, never loaded.
UNIVERSAL_MARKER = "hpc_grpo_converted.json"


def refusal(zero_stage: int | None, vllm_mode: str) -> str | None:
    """Why a run of this layout cannot continue at another world size (None: it can)."""
    if vllm_mode == "server":
        return ("server mode is not resized yet (its vLLM server's nodes and the trainer's "
                "world size are planned together)")
    if zero_stage and zero_stage not in RESHARDED_ZERO_STAGES:
        return (f"ZeRO-{zero_stage} checkpoints have no universal conversion in DeepSpeed "
                "(ds_to_universal converts stages " + ", ".join(map(str, RESHARDED_ZERO_STAGES))
                + ")")
    return None


@dataclasses.dataclass(frozen=True)
class BatchSplit:
    """The batch at a new world size: both batches kept, the largest per-device batch not above
    the run's (its memory plan sized that one) that splits both into whole per-rank parts."""

    global_batch: int  # completions per optimizer step
    generation_batch: int  # completions per generation
    per_device: int
    accumulation: int
    steps_per_generation: int | None  # where the run set it

    def grpo(self) -> dict[str, int]:
        """The GRPOConfig values the resized run trains with."""
        values = {"per_device_train_batch_size": self.per_device,
                  "gradient_accumulation_steps": self.accumulation}
        if self.steps_per_generation is not None:
            values["steps_per_generation"] = self.steps_per_generation
        return values


def split_batch(grpo: Mapping[str, Any], was_world: int, world: int, *, per_device_default: int,
                accumulation_default: int) -> tuple[BatchSplit | None, int, int]:
    """(the split at ``world`` ranks or None where no whole split keeps both batches, the global
    batch, the generation batch) of a run trained with ``grpo`` at ``was_world`` ranks; the
    defaults are TRL's, for a value the run left to it."""
    per_device = int(grpo.get("per_device_train_batch_size") or per_device_default)
    steps = int(grpo.get("gradient_accumulation_steps") or accumulation_default)
    global_batch = per_device * steps * was_world
    generation = int(grpo.get("generation_batch_size") or 0) or (
        per_device * was_world * int(grpo.get("steps_per_generation") or steps))
    fits = [size for size in range(per_device, 0, -1)
            if global_batch % (size * world) == 0 and generation % (size * world) == 0]
    if not fits:
        return None, global_batch, generation
    size = fits[0]
    per_generation = generation // (size * world) if grpo.get("steps_per_generation") else None
    return (BatchSplit(global_batch, generation, size, global_batch // (size * world),
                       per_generation), global_batch, generation)


def min_nodes_refusal(record: RunRecord) -> str | None:
    """Why a run that asks for ``min_nodes`` cannot start at some node count between it and its
    own (None: every count in [min_nodes, nodes] has a layout). The launcher refuses the
    submission by it, so an attempt's ``record_at`` never meets a count it cannot take."""
    low, high = record.min_nodes, record.nodes
    if not low:
        return None
    if not 1 <= low < high:
        return f"min_nodes {low} must be at least 1 and below nodes {high} (0: off)"
    refused = refusal(record.deepspeed.zero_stage if record.deepspeed else None, record.vllm.mode)
    if refused is not None:
        return refused
    grpo = record.grpo_config
    per_device = int(grpo.get("per_device_train_batch_size") or 0)
    steps = int(grpo.get("gradient_accumulation_steps") or 0)
    if not per_device or not steps:
        return "the record names no per-device batch and accumulation to split (internal)"
    generation = int(grpo.get("generation_batch_size") or 0)
    per_generation = int(grpo.get("steps_per_generation") or 0)
    global_batch = per_device * steps * record.world_size
    if (generation and generation != global_batch) or (per_generation and per_generation != steps):
        # a checkpoint inside a generation block holds completions split over the old ranks
        # (planner/resume.py mid_generation): an attempt on fewer nodes could not reuse them
        return ("a generation batch other than the global batch (steps_per_generation) can "
                "leave a checkpoint inside a generation block, which another world size cannot "
                "reuse")
    for nodes in range(low, high):
        world = world_size(nodes, record.procs_per_node)
        split, _, _ = split_batch(grpo, record.world_size, world, per_device_default=per_device,
                                  accumulation_default=steps)
        if split is None:
            return (f"the global batch {global_batch} (per-device {per_device} x accumulation "
                    f"{steps} x {record.world_size} ranks) does not split over {world} ranks "
                    f"({nodes} node(s)) into whole per-device batches")
    return None


def record_at(record: RunRecord, nodes: int) -> RunRecord:
    """The run record of an attempt Slurm started on ``nodes`` nodes (``min_nodes``, issue #60):
    the layout, the rank rows and the batch split at that count, the global batch and the
    generation batch kept. The one rule both sides apply: the node task (torchrun's --nnodes)
    and every rank (its own row, the trainer's batch), each from the count the node task was
    given, so run.json itself is never rewritten under a running job. ``record`` itself at its
    own count; a count outside [min_nodes, nodes] is a ValueError (Slurm granted what the
    script did not ask for)."""
    if nodes == record.nodes:
        return record
    if not record.min_nodes or not record.min_nodes <= nodes < record.nodes:
        raise ValueError(f"this attempt has {nodes} node(s); run.json allows "
                         f"{record.min_nodes or record.nodes}-{record.nodes}")
    refused = min_nodes_refusal(record)
    if refused is not None:
        raise ValueError(f"min_nodes {record.min_nodes}: {refused}")
    grpo = record.grpo_config
    world = world_size(nodes, record.procs_per_node)
    split, _, _ = split_batch(grpo, record.world_size, world,
                              per_device_default=int(grpo["per_device_train_batch_size"]),
                              accumulation_default=int(grpo["gradient_accumulation_steps"]))
    assert split is not None  # min_nodes_refusal checked every count
    tp = record.vllm.tensor_parallel_size
    rows = tuple(rank_row(rank, record.procs_per_node, tp) for rank in range(world))
    return dataclasses.replace(record, nodes=nodes, ranks=rows,
                               grpo_config={**grpo, **split.grpo()})


def needs_conversion(zero_stage: int | None, saved_world_size: int | None, world_size: int) -> bool:
    """The checkpoint's ZeRO shards are laid out for another data-parallel size than this job's.
    ``saved_world_size`` None (a checkpoint marked before the marker held it): the same size."""
    return bool(zero_stage) and saved_world_size is not None and saved_world_size != world_size


def conversion_line(zero_stage: int, was: int, now: int) -> str:
    """What the conversion changes, one line (plan.txt, jobs.jsonl, the rank's log)."""
    return f"ZeRO-{zero_stage} shards converted from {was} to {now} ranks"


def deepspeed_tag(checkpoint_dir: Path) -> str | None:
    """The tag folder's name DeepSpeed's ``latest`` file names (None: not DeepSpeed's)."""
    try:
        tag = (checkpoint_dir / "latest").read_text().strip()
    except (OSError, ValueError):
        return None
    return tag if tag and (checkpoint_dir / tag).is_dir() else None


def universal_folder(checkpoint_dir: Path, tag: str) -> Path:
    """Where the conversion of ``checkpoint_dir/tag`` goes: beside it, inside the checkpoint (so
    retention deletes both together)."""
    return checkpoint_dir / f"{tag}{UNIVERSAL_SUFFIX}"


def converted(checkpoint_dir: Path, tag: str) -> bool:
    """The conversion of this checkpoint finished: its marker names the tag and
    ``latest_universal`` names its folder (what DeepSpeed's universal load reads)."""
    folder = universal_folder(checkpoint_dir, tag)
    try:
        marker = json.loads((folder / UNIVERSAL_MARKER).read_text())
        latest = (checkpoint_dir / LATEST_UNIVERSAL).read_text().strip()
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("tag") == tag and latest == folder.name


def clear_unfinished(checkpoint_dir: Path, tag: str) -> bool:
    """Remove a conversion left half-way (no marker), and its tag file; True if one was."""
    folder = universal_folder(checkpoint_dir, tag)
    if converted(checkpoint_dir, tag) or not folder.exists():
        return False
    shutil.rmtree(folder, ignore_errors=True)
    (checkpoint_dir / LATEST_UNIVERSAL).unlink(missing_ok=True)
    return True


def mark_converted(checkpoint_dir: Path, tag: str, saved_world_size: int, seconds: float) -> None:
    """Mark the conversion finished (after ds_to_universal exited 0), atomically."""
    folder = universal_folder(checkpoint_dir, tag)
    info = {"tag": tag, "from_world_size": saved_world_size, "seconds": round(seconds, 2),
            "time": time.time()}
    tmp = folder / f".{UNIVERSAL_MARKER}.tmp"
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(folder / UNIVERSAL_MARKER)


# The ZeRO conversion's rate, assumed (not measured on a large model yet): DeepSpeed's
# ds_to_universal with one extract and one merge worker reads the checkpoint and writes about as
# much again (fp32 weights and Adam's two states), single-process.
CONVERSION_BYTES_PER_S = 200e6
CONVERSION_MARGIN_S = 300


def with_conversion_time(record: RunRecord, zero_stage: int | None) -> RunRecord:
    """The resumed job's record with room for its ZeRO conversion: rank 0 converts inside the
    start-up while the other ranks wait in a collective, so the watchdog's start-up allowance
    gains the conversion's time and the collective timeout covers it (left as planned, a
    large model's conversion ended every attempt at the floor's 10 minutes and each retry began
    it again). ``record`` unchanged without a conversion (``zero_stage`` None: DDP or none)."""
    if not zero_stage:
        return record
    seconds = CONVERSION_MARGIN_S + ceil(2 * record.checkpoint_bytes / CONVERSION_BYTES_PER_S)
    watchdog = dataclasses.replace(record.watchdog, startup_s=record.watchdog.startup_s + seconds)
    return dataclasses.replace(record, watchdog=watchdog,
                               collective_timeout_s=max(record.collective_timeout_s, seconds))
