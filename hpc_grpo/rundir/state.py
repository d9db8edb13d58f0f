"""``state.json``, typed: what rank 0 and the rank-0 node task record of a run's progress.

Standard library only, like the rest of the run directory's room: the ranks write it, the
launcher's ``status``/``resume`` and the node task read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunState:
    """``state.json``'s schema: rank 0 and the rank-0 node task write it, the launcher reads it.

    Every key a writer may set is a field here (``rundir.update_state`` refuses others).
    ``from_dict`` reads any state.json, of this release or an earlier one, without raising.
    """

    phase: str = ""
    attempt: str = ""
    started: float | None = None
    updated: float | None = None
    step: int = 0
    max_steps: int = 0
    message: str = ""
    notes: tuple[str, ...] = ()
    stop_reason: str | None = None
    stop_cause: str | None = None
    resumed_from: str | None = None
    metrics_lines_dropped: int = 0
    last_checkpoint: str | None = None
    last_checkpoint_step: int | None = None
    last_checkpoint_time: float | None = None
    checkpoint_seconds: float | None = None  # the last save: its step's end to marked complete
    # the training time it held (less than checkpoint_seconds for a background save: async_save)
    checkpoint_held_s: float | None = None
    checkpoint_parts_s: Mapping[str, Any] | None = None  # rank 0's split of the last save
    reward_delta: float | None = None
    gpu_mem_train_begin: Mapping[str, Any] | None = None
    stalled: Mapping[str, Any] | None = None  # the watchdog's finding (runtime/node/watchdog.py)
    tracker_logged_through: int = 0  # the highest step any attempt sent to report_to's trackers
    tracker_sync: str = ""  # the command that uploads the run's offline W&B run, "" for none
    checkpoint_skipped: str | None = None  # the last save skipped for lack of space, one line


    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RunState:
        """A tolerant read: unknown keys are left out (a newer writer's), and a value not of
        the field's type takes the field's default, so one hand-edited file breaks no reader."""
        values: dict[str, Any] = {}
        for name, kinds in _KINDS.items():
            value = (data or {}).get(name)
            if isinstance(value, list) and tuple in kinds:
                value = tuple(value)
            if value is not None and isinstance(value, kinds) \
                    and not (isinstance(value, bool) and bool not in kinds):
                values[name] = value
        return cls(**values)

    def is_attempt(self, attempt: str) -> bool:
        """Whether this state was last written by ``attempt`` (node task and ranks share it)."""
        return bool(attempt) and self.attempt == attempt


STATE_FIELDS = frozenset(f.name for f in dataclasses.fields(RunState))
# Each field's accepted types, from its annotation (an int is a float too; a mapping is a dict).
_TYPES = {"str": (str,), "int": (int,), "float": (float, int), "tuple[str, ...]": (tuple,),
          "Mapping[str, Any]": (dict,)}
_KINDS = {f.name: tuple(t for part in str(f.type).split(" | ") for t in _TYPES.get(part, ()))
          for f in dataclasses.fields(RunState)}

