"""What one run directory holds, read so that nothing in it can break ``status`` as a whole.

The launcher and the ranks write these files, but people edit, copy, truncate and half-delete
run directories, and a status over a thousand runs must not end in a traceback because one of
them holds something unexpected. Every value is checked for the type it should have; what is
wrong goes into ``problems`` (shown on that run's row) and the value is left out.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import METRICS_JSONL, RUN_JSON, STALLED, STATE_JSON, RunRecord
from hpc_grpo.rundir.view import RunView, read_object, read_view
from hpc_grpo.runs import drift


@dataclass(frozen=True)
class Progress:
    """Training progress as the ranks recorded it (state.json, the last metrics line)."""

    phase: str = ""
    step: int = 0
    max_steps: int = 0
    reward: float | None = None
    tokens_per_s: float | None = None
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    cause: str = ""  # state.json stop_cause: why the last attempt stopped or failed
    message: str = ""  # state.json message: what failed (the exception line for a bad config)
    logp_diff: float | None = None  # the last line's vLLM/trainer log-prob difference (drift.py)
    drift: str = ""  # drift.py's line when a recent step exceeds its bound, else ""
    stalled: str = ""  # the hang watchdog's line while its stop is the latest, else ""
    stalled_ranks: tuple[int, ...] = ()  # the ranks it found behind
    skipped: str = ""  # state.json checkpoint_skipped: the last save skipped for lack of space


@dataclass(frozen=True)
class RunFiles(RunView):
    """A run directory's view (``rundir.view``) with the progress ``status`` shows on its row;
    ``problems`` holds the view's and what the progress found of the wrong type."""

    progress: Progress = Progress()


def read_run_record(run_dir: Path, doing: str) -> RunRecord:
    """run.json typed, for the commands that act on the record itself (export, eval, resume):
    an empty, truncated, non-UTF-8 or otherwise unreadable record refuses them in one line, not
    a traceback."""
    view = read_view(run_dir)
    if view.record is None:
        raise UserError(f"run {run_dir.name} cannot be {doing}: "
                        f"{view.record_problem or 'run.json cannot be read'}", field="run",
                        hint="`hpc-grpo status` shows what is wrong with it")
    return view.record


def read_record(run_dir: Path, doing: str) -> dict[str, Any]:
    """run.json as a dict, refused in one line as ``read_run_record`` refuses (export and eval
    still read the record as a dict)."""
    problems: list[str] = []
    record = read_object(run_dir / RUN_JSON, problems, required=True)
    if problems:
        raise UserError(f"run {run_dir.name} cannot be {doing}: {problems[0]}", field="run",
                        hint="`hpc-grpo status` shows what is wrong with it")
    return record


def _number(source: str, data: Mapping[str, Any], key: str, problems: list[str]) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{source}: {key} is {json.dumps(value)[:40]}, not a number")
        return None
    return float(value)


def _text(source: str, data: Mapping[str, Any], key: str, problems: list[str]) -> str:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value or ""
    problems.append(f"{source}: {key} is {json.dumps(value)[:40]}, not text")
    return ""


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _stalled(state: Mapping[str, Any], problems: list[str]) -> tuple[str, tuple[int, ...]]:
    """The watchdog's finding (runtime/node/watchdog.py) while it is why the run stopped last:
    the next attempt's rank 0 clears stop_cause, and restarts.jsonl keeps the history."""
    found = state.get("stalled")
    if state.get("stop_cause") != STALLED or not isinstance(found, dict):
        return "", ()
    ranks = found.get("ranks_behind")
    if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
        problems.append("state.json: stalled.ranks_behind is not a list of ranks")
        ranks = []
    return _text("state.json stalled", found, "line", problems) or "no progress", tuple(ranks)


def _progress(view: RunView, problems: list[str]) -> Progress:
    state, recent = view.raw_state, list(view.recent_metrics)
    metrics = recent[-1] if recent else {}
    # a step that trained on an earlier step's generation logs no reward (steps_per_generation)
    rewarded: Mapping[str, Any] = next(
        (row for row in reversed(recent) if row.get("reward_mean") is not None), {})
    phase = state.get("phase", "")
    if not isinstance(phase, str):
        problems.append(f"{STATE_JSON}: phase is {json.dumps(phase)[:40]}, not a word")
        phase = ""
    step = _number(METRICS_JSONL, metrics, "step", problems)
    state_step = _number(STATE_JSON, state, "step", problems)
    step = state_step if step is None else step
    # TRL's -1 (train by epochs) is no total: the trainer's own count arrives with the first step
    max_steps = next((n for n in (_number(STATE_JSON, state, "max_steps", problems),
                                  view.head.max_steps) if n is not None and n > 0), None)
    stalled, stalled_ranks = _stalled(state, problems)
    resumable = view.resume_checkpoint
    return Progress(
        phase=phase, step=int(step or 0), max_steps=int(max_steps or 0),
        reward=_number(METRICS_JSONL, rewarded, "reward_mean", problems),
        tokens_per_s=_number(METRICS_JSONL, metrics, "tokens_per_s", problems),
        checkpoint_step=resumable.step if resumable else None,
        checkpoint_time=resumable.saved_at if resumable else None,
        cause=_text(STATE_JSON, state, "stop_cause", problems),
        message=_text(STATE_JSON, state, "message", problems),
        logp_diff=next((v for row in reversed(recent) if (v := drift.logp_diff(row)) is not None),
                       None),
        drift=found.line() if (found := drift.judge(recent)) else "",
        stalled=stalled, stalled_ranks=stalled_ranks,
        skipped=_text("state.json", state, "checkpoint_skipped", problems),
    )


def read_run(run_dir: Path) -> RunFiles:
    """Everything ``status`` shows about one run directory; never raises for its content."""
    view = read_view(run_dir)
    problems = list(view.problems)
    progress = _progress(view, problems)
    fields = {f.name: getattr(view, f.name) for f in dataclasses.fields(RunView)}
    return RunFiles(**{**fields, "problems": tuple(problems)}, progress=progress)
