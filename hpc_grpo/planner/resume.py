"""What ``resume`` may change about a run, and whether there is anything left to train.

A resumed run is the same run: it continues from a checkpoint in the same run directory, so the
new job must load that checkpoint exactly as the old job saved it and see the same data in the
same order. What the checkpoint or the data order depend on cannot change (the model, the data,
the ZeRO layout, the global batch, the seeds); how long to train and how often to save can.

The world size may change where rundir/reshard.py allows it (``resize``; the one rule, which
the ranks follow too): DDP without ZeRO, full or LoRA (the weights, the adapter and the
optimizer are saved whole by rank 0, only the RNG states per rank), and DeepSpeed ZeRO-1/2/3,
whose shards the resumed job's rank 0 converts once through DeepSpeed's universal checkpoint
before loading (runtime/rank/checkpoints/universal.py). The global batch (completions per
optimizer step, per-device batch x accumulation x world size) and the generation batch
(completions per generation, what TRL's RepeatSampler draws prompts by) are kept, so every step
draws the same prompts in the same order; the per-device batch (never larger than before: the
memory plan sized it) and the accumulation are replanned. Server mode is refused. Pure: two
typed run records and numbers in, problems out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from math import gcd
from typing import Any

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.bounds import TRL_DEFAULTS
from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.contract import RunRecord, world_size

_NEW_RUN = "submit a new run for that"
# What a resume cannot change in run.json, named as the file names it (dotted for nested blocks),
# read from the typed record, with the reason why.
FIXED_RECORD: dict[str, tuple[Callable[[RunRecord], Any], str]] = {
    "model": (lambda r: r.model, "the checkpoint holds this model's weights"),
    "payload": (lambda r: r.payload, "the run directory holds this payload's results"),
    "dataset.name": (lambda r: r.dataset.name,
                     "the checkpoint's data position counts this dataset's prompts"),
    "dataset.prompt_column": (lambda r: r.dataset.prompt_column,
                              "the checkpoint's data position counts this dataset's prompts"),
    "dataset.split": (lambda r: r.dataset.split,
                      "the checkpoint's data position counts this dataset's prompts"),
    "reward_funcs": (lambda r: r.reward_funcs,
                     "the rewards logged so far come from these functions"),
    "seed": (lambda r: r.seed,
             "the data order and every RNG stream in the checkpoint follow this seed"),
    "device": (lambda r: r.device,
               "the checkpoint's optimizer and RNG states were saved on this device"),
    "vllm.tensor_parallel_size": (lambda r: r.vllm.tensor_parallel_size,
                                  "vLLM's sampling seeds are rank // TP: another TP size samples "
                                  "other completions"),
    "vllm.mode": (lambda r: r.vllm.mode,
                  "server mode trains on other GPUs than colocate: another world size"),
    # Staged on the login node (preflight/stage.py): a branch staged again since points elsewhere.
    "model_load.commit": (lambda r: r.model_load.commit,
                          "the run trains from this commit of the model (stage it with "
                          "--revision COMMIT and resume with --set model_revision=COMMIT)"),
    "dataset.commit": (lambda r: r.dataset.commit,
                       "the checkpoint's data position counts this commit's prompts"),
}
# GRPOConfig fields that shape the batch or the data order: another value trains other steps.
FIXED_GRPO: dict[str, str] = {
    "per_device_train_batch_size": "the checkpoint's data position counts batches of this size",
    "gradient_accumulation_steps": "the checkpoint's data position counts these micro-steps",
    "num_generations": "the checkpoint's data position counts prompts per group of this size",
    "generation_batch_size": "it sets how many prompts each step draws",
    "steps_per_generation": "it sets how many prompts each step draws",
    "seed": "the data order and every RNG stream in the checkpoint follow this seed",
    "data_seed": "the checkpoint's data position is in this seed's order",
    "shuffle_dataset": "the checkpoint's data position is in this order",
}


def pinned_layout(spec: JobSpec, record: RunRecord) -> JobSpec:
    """The spec of a resume with the saved run's TP size, ZeRO stage and optimizer offload where
    the spec leaves them to the planner. The plan picks the fastest layout from the link figures,
    which doctor may have measured since the run started; a layout chosen again would not load
    the checkpoint (``unchangeable`` refuses it), so the saved one stands. What the user sets on
    the resume stays theirs, and is refused there if it differs."""
    if record.device != "cuda":
        return spec  # CPU plans choose no layout
    pins: dict[str, Any] = {}
    tp = record.vllm.tensor_parallel_size
    if not spec.tensor_parallel_size and tp > 0:
        pins["tensor_parallel_size"] = tp
    if spec.zero_stage is None:
        pins["zero_stage"] = _zero(record) or 0
    if spec.offload_optimizer is None and record.deepspeed is not None:
        pins["offload_optimizer"] = bool(record.deepspeed.offload_optimizer)
    return dataclasses.replace(spec, **pins) if pins else spec


def _zero(record: RunRecord) -> int | None:
    return record.deepspeed.zero_stage if record.deepspeed is not None else None


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return "unset" if value is None else str(value)


def unchangeable(old: RunRecord, new: RunRecord) -> list[UserError]:
    """Each difference between the run's record and the resumed job's that a resume cannot make,
    one problem each, with the reason (the site profile changing under a run counts too). A new
    layout is allowed where ``resize`` allows it, with the batch split it replans."""
    problems: list[UserError] = []
    for key, (read, why) in FIXED_RECORD.items():
        was, now = read(old), read(new)
        if was not in (None, "") and _shown(was) != _shown(now):  # "": older or unstaged
            problems.append(UserError(f"cannot change {key} from {_shown(was)} to {_shown(now)}: "
                                      f"{why}", field="resume", hint=_NEW_RUN))
    (zero, new_zero) = (_zero(old), _zero(new))
    expected = dict(old.grpo_config)
    if (old.nodes, old.procs_per_node) != (new.nodes, new.procs_per_node):
        try:
            change = resize(old, new.nodes, new.procs_per_node)
        except UserError as refused:
            problems.append(refused)
        else:
            expected.update(change.grpo if change else {})
    if zero != new_zero:
        problems.append(UserError(
            f"cannot change the ZeRO stage from {_shown(zero)} to {_shown(new_zero)}: "
            "the checkpoint's optimizer state is laid out for its stage", field="resume",
            hint=_NEW_RUN))
    new_grpo = new.grpo_config
    for key, why in FIXED_GRPO.items():
        if expected.get(key) != new_grpo.get(key):
            problems.append(UserError(
                f"cannot change {key} from {_shown(expected.get(key))} to "
                f"{_shown(new_grpo.get(key))}: {why}", field="resume", hint=_NEW_RUN))
    return problems


@dataclasses.dataclass(frozen=True)
class Resize:
    """A resume at another world size: the layouts, the global batch kept, and the GRPOConfig
    values the resumed job trains with (``grpo``: the per-device batch and the accumulation,
    and steps_per_generation where the run set it)."""

    was: tuple[int, int]  # (nodes, processes per node)
    now: tuple[int, int]
    global_batch: int  # completions per optimizer step
    generation_batch: int  # completions per generation
    grpo: dict[str, int]
    zero_stage: int | None = None  # ZeRO shards the resumed job converts (rundir/reshard.py)

    def line(self) -> str:
        """What changed, one line (plan.txt, jobs.jsonl, the resume's output)."""
        (n, p), (was_n, was_p) = self.now, self.was
        per_device = self.grpo["per_device_train_batch_size"]
        steps = self.grpo["gradient_accumulation_steps"]
        gen = (f", generation batch {self.generation_batch}"
               if self.generation_batch != self.global_batch else "")
        ranks = (world_size(was_n, was_p), world_size(n, p))
        shards = f"; {reshard.conversion_line(self.zero_stage, *ranks)}" if self.zero_stage else ""
        return (f"resumed at {n} x {p} from {was_n} x {was_p}, global batch {self.global_batch}"
                f"{gen} kept: per-device {per_device} x accumulation {steps}{shards}")


def resize(old: RunRecord, nodes: int, procs_per_node: int) -> Resize | None:
    """The batch split of a resume at ``nodes`` x ``procs_per_node`` (None: the layout is the
    run's). Refused in one line each: a layout rundir/reshard.py does not resize (server mode),
    and a global or generation batch that no per-device batch x accumulation splits over the new
    world size. Of the splits that keep both, the largest per-device batch not above the run's
    (the memory plan sized that). A ZeRO run's change names the conversion its job makes."""
    was, now = (old.nodes, old.procs_per_node), (nodes, procs_per_node)
    if was == now:
        return None
    layout = f"cannot change the layout from {was[0]} node(s) x {was[1]} process(es) to " \
             f"{nodes} x {procs_per_node}"
    zero = _zero(old)
    refused = reshard.refusal(zero, old.vllm.mode)
    if refused is not None:
        raise UserError(f"{layout}: {refused}", field="resume",
                        hint=f"keep {was[0]} x {was[1]}, or {_NEW_RUN}")
    grpo = old.grpo_config
    per_device = int(grpo.get("per_device_train_batch_size")
                     or TRL_DEFAULTS["per_device_train_batch_size"])
    steps = int(grpo.get("gradient_accumulation_steps")
                or TRL_DEFAULTS["gradient_accumulation_steps"])
    world = world_size(nodes, procs_per_node)
    split, global_batch, generation = reshard.split_batch(
        grpo, old.world_size, world, per_device_default=per_device, accumulation_default=steps)
    if split is None:
        both = f" and generation batch {generation}" if generation != global_batch else ""
        raise UserError(
            f"{layout}: the global batch {global_batch} (per-device {per_device} x accumulation "
            f"{steps} x {old.world_size} ranks){both} does not split over {world} ranks "
            "into whole per-device batches", field="resume",
            hint=f"use a world size that divides {gcd(global_batch, generation)}, or {_NEW_RUN}")
    return Resize(was, now, global_batch, generation, split.grpo(), zero or None)


def mid_generation(step: int, change: Resize) -> UserError:
    """The checkpoint was saved inside a generation block: its buffered completions are split
    over the old ranks (runtime/rank/generation/buffer.py), which a resize cannot reuse."""
    (n, p), (was_n, was_p) = change.now, change.was
    return UserError(
        f"cannot change the layout from {was_n} node(s) x {was_p} process(es) to {n} x {p} "
        f"at checkpoint-{step}: it was saved inside a generation block, its buffered "
        f"completions are split over {world_size(was_n, was_p)} ranks", field="resume",
        hint=f"resume at {was_n} x {was_p} to the next checkpoint at a generation's end first")


def left_to_train(*, phase: str, step: int, checkpoint_step: int, max_steps: int) -> UserError | None:
    """Why there is nothing to resume (training done, or max_steps not past the checkpoint)."""
    if max_steps <= 0:  # TRL's -1: by epochs; the trainer knows its own end
        return None
    if phase == "done" and max_steps <= step:
        return UserError(f"the run finished at step {step}: max_steps {max_steps} leaves nothing "
                         "to train", field="resume",
                         hint=f"to train further, --set max_steps=N with N > {step}")
    if max_steps <= checkpoint_step:
        return UserError(f"max_steps {max_steps} is not past the checkpoint at step "
                         f"{checkpoint_step}: nothing would be trained", field="resume",
                         hint=f"--set max_steps=N with N > {checkpoint_step}")
    return None
