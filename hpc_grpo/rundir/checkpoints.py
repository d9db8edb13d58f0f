"""A run's checkpoints: which folder is one, which one is complete, and the space they go to.

Stdlib only, like the rest of the run directory's room: the ranks decide by these rules which
checkpoint a restarted run resumes from and which ones retention may delete, and the launcher's
``status``, ``resume``, ``export`` and ``eval`` decide by the very same ones which checkpoint a
new job will resume from or an export may read. A checkpoint ``checkpoint-<step>`` is complete
when rank 0's marker (written after every rank's part of the save, behind a barrier) names its
step and the trainer state inside names that step too: a save killed half-way has files but no
marker, and a folder copied or renamed by hand names another step than its contents.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import CHECKPOINT_MARKER, CHECKPOINTS

TRAINER_STATE = "trainer_state.json"  # transformers' Trainer writes it into every checkpoint
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    """The step in a ``checkpoint-<step>`` folder name, or None for any other name."""
    match = _NAME.match(path.name)
    return int(match.group(1)) if match else None


def write_marker(checkpoint_dir: Path, step: int, world_size: int) -> None:
    """Mark a checkpoint complete (rank 0, after a barrier that follows every rank's save)."""
    info = {"step": step, "world_size": world_size, "time": time.time()}
    tmp = checkpoint_dir / f".{CHECKPOINT_MARKER}.tmp"
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(checkpoint_dir / CHECKPOINT_MARKER)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _whole(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except (ValueError, OverflowError):
        return None


def marker_step(folder: Path) -> int | None:
    """The step the completion marker names, or None without a readable marker."""
    return _whole(_json_object(folder / CHECKPOINT_MARKER).get("step"))


def marker_world_size(folder: Path) -> int | None:
    """The world size that saved the checkpoint, as its marker names it (None without one)."""
    return _whole(_json_object(folder / CHECKPOINT_MARKER).get("world_size"))


def _complete(folder: Path, step: int, marker: dict[str, Any]) -> bool:
    return _whole(marker.get("step")) == step \
        and _whole(_json_object(folder / TRAINER_STATE).get("global_step")) == step


def is_complete(checkpoint_dir: Path) -> bool:
    """The one completeness rule: marker step = folder step = trainer_state's global_step."""
    step = checkpoint_step(checkpoint_dir)
    return step is not None and _complete(checkpoint_dir, step,
                                          _json_object(checkpoint_dir / CHECKPOINT_MARKER))


@dataclass(frozen=True)
class Checkpoint:
    """One ``checkpoint-<step>`` folder of a run."""

    path: Path
    step: int
    complete: bool  # ``is_complete``: what the ranks would resume from
    saved_at: float | None = None  # the marker's time: when rank 0 marked it complete


def _checkpoint(folder: Path, step: int) -> Checkpoint:
    marker = _json_object(folder / CHECKPOINT_MARKER)
    when = marker.get("time")
    return Checkpoint(folder, step, _complete(folder, step, marker),
                      float(when) if isinstance(when, int | float) and not isinstance(when, bool)
                      else None)


def in_folder(output_dir: Path) -> list[Checkpoint]:
    """Every ``checkpoint-<step>`` folder directly under ``output_dir``, by step; [] when it
    cannot be listed."""
    try:
        entries = list(output_dir.iterdir())
    except OSError:
        return []
    found = [_checkpoint(p, step) for p in entries
             if (step := checkpoint_step(p)) is not None and p.is_dir()]
    return sorted(found, key=lambda c: c.step)


def run_checkpoints(run_dir: Path) -> list[Checkpoint]:
    """A run's checkpoints (its ``checkpoints/`` folder), by step."""
    return in_folder(run_dir / CHECKPOINTS)


def newest_complete(output_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step under ``output_dir``, if any: the one a
    restarted rank resumes from."""
    complete = [c for c in in_folder(output_dir) if c.complete]
    return complete[-1].path if complete else None


def newest_complete_step(run_dir: Path) -> int | None:
    """The step a new job of the run resumes from (``newest_complete``), or None."""
    newest = newest_complete(run_dir / CHECKPOINTS)
    return checkpoint_step(newest) if newest is not None else None


def existing_parent(path: Path) -> Path:
    """``path`` or its nearest parent that exists: where a folder not made yet will live."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def folder_blocked(path: Path) -> str:
    """Why ``path`` cannot be a folder, new or existing: "is a file", "is under the file X";
    "" when it can. The one rule of every command that writes a folder the user names
    (--output-root, export --to, ...): mkdir under a file fails late, with FileExistsError
    or NotADirectoryError, after the work it was to hold."""
    existing = existing_parent(path)
    if existing.is_dir():
        return ""
    return "is a file" if existing == path else f"is under the file {existing}"


_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a folder (a FIFO, a
    device, a socket), else None. Every reader of a file the user names asks this before
    opening it: opening a FIFO for reading waits for a writer forever, and a recipe, site
    profile, dataset or run.json given as one hung the command with nothing printed (#58)."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # missing, under a file, unreadable: the reader says so
        return None
    return next((kind for test, kind in _SPECIAL if test(mode)), None)


def free_bytes(path: Path) -> int:
    """Free bytes of the file system that holds ``path`` (or will: its nearest existing
    parent). ``shutil.disk_usage`` cannot see Lustre or GPFS quotas."""
    return shutil.disk_usage(existing_parent(path)).free


def free_bytes_or_none(path: Path) -> int | None:
    """``free_bytes``, or None where even that fails (an error's report must not raise)."""
    try:
        return free_bytes(path)
    except OSError:
        return None
