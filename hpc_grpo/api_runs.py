"""The library's run side: status, logs, cancel and a followed run's progress.

Apart from ``api`` (which plans, renders and submits) so that the CLI's reading commands load
neither Jinja, YAML nor the planner: ``status`` must stay fast over a thousand runs on a busy
login node (tests/unit/cli/test_cli_imports.py holds it). ``api`` re-exports these functions.
"""

from __future__ import annotations

from pathlib import Path

from hpc_grpo.runs import track


def progress(run_dir: Path) -> track.FollowedRun:
    """A followed run's status row, last step time and final summary."""
    return track.progress(run_dir)


def status(names: tuple[str, ...] = ()) -> list[track.RunStatus]:
    """Every run (or the named ones) with its scheduler state and training progress."""
    return track.status(names)


def log_paths(name: str, rank: int | None) -> list[Path]:
    """A rank's log (``--rank N``), or every rank's and the node tasks' own logs."""
    return track.log_paths(name, rank)


def cancel(name: str) -> track.Action:
    """Cancel the run's job, if it is still this run's and not over."""
    return track.cancel(name)
