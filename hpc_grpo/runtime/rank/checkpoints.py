"""Which checkpoint a restarted run resumes from (stdlib only).

A folder `checkpoint-<step>` counts only when it holds the completion marker, written by rank 0
after every rank has finished its part of the save; a save killed half-way has no marker and is
never picked, however many files it already holds.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.contract import CHECKPOINT_MARKER

MARKER = CHECKPOINT_MARKER
TRAINER_STATE = "trainer_state.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    """The step in a `checkpoint-<step>` folder name, or None for any other name."""
    match = _NAME.match(path.name)
    return int(match.group(1)) if match else None


def write_marker(checkpoint_dir: Path, step: int, world_size: int) -> None:
    """Mark a checkpoint complete (call after a barrier that follows the save on every rank)."""
    info = {"step": step, "world_size": world_size, "time": time.time()}
    tmp = checkpoint_dir / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(checkpoint_dir / MARKER)


def is_complete(checkpoint_dir: Path) -> bool:
    """Marker present and consistent with the folder name and the trainer state inside it."""
    step = checkpoint_step(checkpoint_dir)
    if step is None:
        return False
    try:
        marker = json.loads((checkpoint_dir / MARKER).read_text())
        state = json.loads((checkpoint_dir / TRAINER_STATE).read_text())
    except (OSError, ValueError):
        return False
    return int(marker.get("step", -1)) == step and int(state.get("global_step", -1)) == step


def newest_complete(output_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step under output_dir, if any."""
    if not output_dir.is_dir():
        return None
    found = [
        (step, p)
        for p in output_dir.iterdir()
        if p.is_dir() and (step := checkpoint_step(p)) is not None and is_complete(p)
    ]
    return max(found)[1] if found else None


def checkpoint_info(checkpoint_dir: Path) -> dict[str, Any]:
    """Step and marker time of a complete checkpoint, for state.json."""
    marker = json.loads((checkpoint_dir / MARKER).read_text())
    return {"step": int(marker["step"]), "time": float(marker["time"]), "path": str(checkpoint_dir)}
