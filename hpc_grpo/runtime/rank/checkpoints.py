"""Which checkpoint a restarted run resumes from (stdlib only).

A folder `checkpoint-<step>` counts only when it holds the completion marker, written by rank 0
after every rank has finished its part of the save; a save killed half-way has no marker and is
never picked, however many files it already holds.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.checkpoints import (  # the one rule, shared with the launcher
    checkpoint_step,
    free_bytes,
    free_bytes_or_none,
    is_complete,
    newest_complete,
    write_marker,
)
from hpc_grpo.rundir.contract import CHECKPOINT_MARKER, DEFAULT_SAVE_TOTAL_LIMIT

__all__ = ["checkpoint_step", "free_bytes", "free_bytes_or_none", "is_complete",
           "newest_complete", "write_marker"]

MARKER = CHECKPOINT_MARKER


def folder_bytes(path: Path) -> int:
    """Bytes of every file under path (a checkpoint's size on disk, as measured)."""
    total = 0
    for item in path.rglob("*"):
        try:
            if item.is_file():
                total += item.stat().st_size
        except OSError:  # rotated away while we looked
            continue
    return total


def bytes_needed(planned: int, output_dir: Path) -> int:
    """What the next save writes: the newest complete checkpoint's measured size where there is
    one (the truth for this run), else the plan's estimate (0: unknown, nothing is checked)."""
    newest = newest_complete(output_dir)
    return folder_bytes(newest) if newest is not None else planned


def skip_line(step: int, needed: int, free: int, output_dir: Path) -> str:
    gib = float(2**30)
    return (f"checkpoint at step {step} skipped: it needs {needed / gib:.1f} GiB but "
            f"{free / gib:.1f} GiB are free under {output_dir}; the newest complete checkpoint "
            "stays the one a restart resumes from")


# What torch's writer says when a write fails (it hides the errno): the 7B save that filled a
# 64 GiB disk on an H200 ended with these (issue #15).
_TORCH_WRITE_FAILED = ("iostream error", "unexpected pos", "file write failed")
LOW_SPACE = 2**30  # below this much free space a failed write is taken for a full disk


def disk_full_message(exc: BaseException, free: int | None) -> str:
    """"disk full: ..." when exc (or its cause) is a write that failed for lack of space: ENOSPC,
    or torch's writer error while the output file system is (nearly) full; else ""."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"disk full: {seen.strerror or 'no space left on device'} ({seen.filename or exc})"
        text = str(seen)
        if any(s in text for s in _TORCH_WRITE_FAILED) and free is not None and free < LOW_SPACE:
            return f"disk full: a checkpoint write failed ({text.strip()[:120]}) with " \
                   f"{free / 2**20:.0f} MiB free"
        seen = seen.__cause__ or seen.__context__
    return ""


def remove_incomplete(output_dir: Path) -> list[Path]:
    """Delete checkpoint folders without the completion marker (a save cut off by a full disk:
    never resumed from, and its files hold the space state.json needs to record why)."""
    if not output_dir.is_dir():
        return []
    gone = [p for p in output_dir.iterdir()
            if p.is_dir() and checkpoint_step(p) is not None and not is_complete(p)]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def retention_limit(grpo_config: Mapping[str, Any]) -> int | None:
    """How many complete checkpoints a run keeps: the recipe's save_total_limit, else what the
    plan sized into run.json, else the project's default (None or <= 0: every one)."""
    limit = grpo_config.get("save_total_limit", DEFAULT_SAVE_TOTAL_LIMIT)
    return int(limit) if limit is not None and int(limit) > 0 else None


def retain(output_dir: Path, keep: int | None, protect: Path | None = None) -> list[Path]:
    """After a checkpoint is marked complete (rank 0, every rank past the save): delete every
    checkpoint folder without the marker (a killed save's; none is being written now) and the
    oldest complete ones beyond ``keep`` (by step; ``protect``, a best checkpoint, is never
    deleted and counts toward ``keep``: with keep 1 and an older best, two stay). The newest
    complete checkpoint is never deleted; the deleted folders are returned.
    """
    if not output_dir.is_dir():
        return []
    found = [(step, p) for p in output_dir.iterdir()
             if p.is_dir() and (step := checkpoint_step(p)) is not None]
    complete = sorted((step, p) for step, p in found if is_complete(p))
    gone = [p for _, p in found if not is_complete(p)]
    if keep is not None and complete:
        older = [p for _, p in complete[:-1] if protect is None or p != protect]
        gone += older[:max(0, len(complete) - keep)]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone
