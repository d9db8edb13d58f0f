"""What every rank hook is given: ``install(trainer, ctx: HookContext) -> list[str]``.

A hook changes the built GRPOTrainer (a callback added, a method wrapped on the instance) and
returns the lines it has for the rank's log ([] when it has nothing to say); the order the
hooks run in is declared once, in hooks.py. Stdlib only: the light modules that hold hooks
(heartbeat among them, imported before torch) import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hpc_grpo.rundir.contract import RunRecord


@dataclass(frozen=True)
class HookContext:
    """This rank's run and what the start-up found before the trainer was built.

    ``prefetch``: the resume's read-ahead thread (checkpoints/prefetch.py), None when there is
    none; ``trackers`` and ``logged``: tracking.reporters and tracking.prepare's answers;
    ``save_clock``: the checkpoint marker's SaveClock (checkpoints/save_parts.py), ``marker``
    the marker itself (checkpoints/background_save.py); ``clock``,
    ``profiler``: rank 0's start-up clock (observe/startup_times.py) and profiler
    (observe/startup_profile.py, None unless asked for)."""

    run: RunRecord
    run_dir: Path
    rank: int
    env: Mapping[str, str]
    attempt: str
    resume: Path | None
    resume_step: int
    prefetch: Any = None
    trackers: tuple[str, ...] = ()
    logged: int = 0
    save_clock: Any = None
    clock: Any = None
    profiler: Any = None
    marker: Any = None  # the trainer's CheckpointMarkerCallback (checkpoints/marker.py)

    @property
    def lead(self) -> bool:
        """Rank 0, the single writer of the run directory's shared files."""
        return self.rank == 0


class Hook(Protocol):
    def __call__(self, trainer: Any, ctx: HookContext) -> list[str]: ...
