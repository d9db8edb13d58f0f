"""Each epoch's data order as a function of (seed, epoch), so a resumed run sees the same prompts.

Why: TRL 1.16's ``RepeatSampler`` seeds its own ``torch.Generator`` once, when the trainer
builds it, and draws one ``randperm`` per pass over the data: epoch ``e`` is the ``e+1``-th draw
since seeding. A process that resumes in epoch ``e`` builds a fresh sampler, and transformers
5.x replays nothing of the epochs before (its resume only skips the batches already trained
in the current epoch, over that one fresh draw). A resume in the first epoch is therefore exact,
but one in epoch ``e >= 1`` trains the rest of epoch ``e`` on epoch 0's order and epoch ``e + k``
on epoch ``k``'s. ``RepeatSampler`` has no ``set_epoch``, and with several processes the
wrappers accelerate puts around it for the resumed epoch (``SkipBatchSampler`` over
``BatchSamplerShard``) would not pass one on anyway.

What: at every epoch start the generator is re-seeded and ``e`` permutations are drawn and
thrown away, so the sampler's own draw is the ``e+1``-th, exactly as in an uninterrupted run,
whatever happened before. The epoch comes from the trainer state (``floor(state.epoch)``: the
Trainer sets it to ``e`` at the end of epoch ``e - 1`` and restores it from the checkpoint's
trainer_state.json). Nothing new is saved, so checkpoints written before this module resume
with the uninterrupted order from then on. Replaying costs ``e`` extra permutations of the
dataset's indices per epoch, noise next to one GRPO step.
"""

from __future__ import annotations

import math
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hpc_grpo.runtime.rank.context import HookContext


def position(sampler: Any, epoch: int) -> bool:
    """Put ``sampler``'s generator where an uninterrupted run has it before epoch ``epoch``'s draw.

    False (nothing done) for a sampler that does not shuffle with a seeded generator of its own.
    """
    import torch  # here: the module imports without torch

    generator = getattr(sampler, "generator", None)
    seed = getattr(sampler, "seed", None)
    if not getattr(sampler, "shuffle", False) or generator is None or seed is None:
        return False
    generator.manual_seed(seed)
    for _ in range(epoch):
        torch.randperm(sampler.num_samples, generator=generator)
    return True


class EpochOrderCallback(TrainerCallback):
    """Positions the train sampler's generator at every epoch start (before its loader iterates)."""

    def __init__(self) -> None:
        self.sampler: Any = None
        self.positioned: list[int] = []  # epochs positioned in this process (logs and tests)

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        epoch = math.floor(state.epoch or 0)
        if self.sampler is not None and position(self.sampler, epoch):
            self.positioned.append(epoch)
            print(f"[data] epoch {epoch + 1}: order {epoch + 1} of seed {self.sampler.seed}", flush=True)
        return control


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``position_sampler``, silent."""
    position_sampler(trainer)
    return []


def position_sampler(trainer: Any) -> EpochOrderCallback:
    """Record the train sampler the trainer builds and position it at every epoch start."""
    callback = EpochOrderCallback()
    build = trainer._get_train_sampler

    def train_sampler(*args: Any, **kwargs: Any) -> Any:
        callback.sampler = build(*args, **kwargs)
        return callback.sampler

    trainer._get_train_sampler = train_sampler
    trainer.add_callback(callback)
    return callback
