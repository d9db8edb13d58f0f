"""Where a checkpoint's time goes, part by part, on every rank.

Why: the stop's save is on the path from a preemption signal to the next attempt's first step
(the restart goal), and ``checkpoint_seconds`` is one number. On the two-node GPU sandbox
(2 x H200, 1.5B, ZeRO-3, session 45) a save took 8.9 s where the write benchmark puts each
rank's 9.2 GB partition at about 2.5 s pinned: the rest had no name. This splits each save into
the calls transformers makes (``Trainer._save_checkpoint`` in 5.x) and the project's own
completion step, so a rank log says which part to shorten.

Parts, seconds on this rank, for the last save:
- ``before``: the step's end (the marker callback's ``on_step_end``) to ``_save_checkpoint``:
  the later callbacks (the free-space check's all-reduce) and the step's logging.
- ``model_files``: ``save_model`` (the model file; under ``deepspeed_save`` the config and
  tokenizer only; LoRA's adapter).
- ``optimizer``: ``_save_optimizer_and_scheduler`` (DeepSpeed's ``save_checkpoint``, this
  rank's partition and the barriers DeepSpeed makes inside it, so a rank that writes fast also
  waits here for the slowest; ``optimizer.pt`` without DeepSpeed).
- ``rng``: ``_save_rng_state``.
- ``rest_of_save``: the rest of ``_save_checkpoint`` (``store_flos``, TRL's model card,
  ``trainer_state.json``, the pinned blocks' release: ``pinned_save.py``).
- ``wait_for_ranks``: the barrier before the completion marker: how far this rank finished
  ahead of the slowest.
- ``marker_and_retention``: rank 0's marker and the removal of older checkpoints.
- ``background_write``: an ``async_save`` run's periodic save only (``background_save.py``):
  from training going on to the marker, while the writer thread wrote the files.

A method this transformers lacks is left unwrapped: its time falls into ``rest_of_save``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.observe.startup_times import timed

# (trainer attribute, part): the calls inside _save_checkpoint, timed separately
_INNER = (("save_model", "model_files"), ("_save_optimizer_and_scheduler", "optimizer"),
          ("_save_rng_state", "rng"))
PARTS = ("before", "model_files", "optimizer", "rng", "rest_of_save", "wait_for_ranks",
         "marker_and_retention", "background_write")
_LABELS = {"before": "before", "model_files": "model files", "optimizer": "optimizer",
           "rng": "rng", "rest_of_save": "rest of save", "wait_for_ranks": "waiting for ranks",
           "marker_and_retention": "marker and retention",
           "background_write": "written in the background"}


@dataclass
class SaveClock:
    """The current save's parts; reset at every step's end, read by the marker callback."""

    step_end: float = field(default_factory=time.perf_counter)
    parts: dict[str, float] = field(default_factory=dict)

    def step_ended(self) -> None:
        self.step_end = time.perf_counter()
        self.parts.clear()  # the same dict: the wrappers add into it

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        """The parts present, in PARTS order, to the millisecond."""
        return {part: round(self.parts[part], 3) for part in PARTS if part in self.parts}


def line(folder_name: str, parts: dict[str, float]) -> str:
    """The rank log's line for one save."""
    total = sum(parts.values())
    split = ", ".join(f"{_LABELS[part]} {seconds:.2f}" for part, seconds in parts.items())
    return f"{folder_name} saved in {total:.2f} s on this rank: {split}"


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``time_saves`` into the checkpoint marker's clock, silent."""
    time_saves(trainer, ctx.save_clock)
    return []


def time_saves(trainer: Any, clock: SaveClock) -> None:
    """Wrap the trainer's save calls (on the instance, after every other wrapper, so each part
    includes what ``deepspeed_save`` and ``pinned_save`` do there) to time them into ``clock``."""
    inner = [(name, part) for name, part in _INNER if callable(getattr(trainer, name, None))]
    for name, part in inner:
        setattr(trainer, name, timed(getattr(trainer, name), clock.parts, part))
    original = trainer._save_checkpoint

    @functools.wraps(original)
    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        clock.add("before", began - clock.step_end)
        inside = sum(clock.parts.get(part, 0.0) for _, part in inner)
        try:
            return original(*args, **kwargs)
        finally:
            inner_s = sum(clock.parts.get(part, 0.0) for _, part in inner) - inside
            clock.add("rest_of_save", time.perf_counter() - began - inner_s)

    trainer._save_checkpoint = save_checkpoint
