"""What one run directory holds, read so that nothing in it can break ``status`` as a whole.

The launcher and the ranks write these files, but people edit, copy, truncate and half-delete
run directories, and a status over a thousand runs must not end in a traceback because one of
them holds something unexpected. Every value is checked for the type it should have; what is
wrong goes into ``problems`` (shown on that run's row) and the value is left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import (
    CHECKPOINT_MARKER,
    CHECKPOINTS,
    JOBS_JSONL,
    METRICS_JSONL,
    RESTARTS_JSONL,
    RUN_JSON,
    STALLED,
    STARTUP_JSONL,
    STATE_JSON,
)
from hpc_grpo.runs import drift
from hpc_grpo.runs.identity import JobIdentity, from_jobs

RECENT = 32  # metrics lines status reads from a run's end (read_run)


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
class RunFiles:
    """What the launcher and the ranks wrote into one run directory, read without Slurm."""

    run_id: str
    run_dir: Path
    record: dict[str, Any]
    jobs: list[dict[str, Any]]
    state: dict[str, Any]
    last_metrics: dict[str, Any]
    restarts: list[dict[str, Any]]
    progress: Progress = Progress()
    problems: tuple[str, ...] = field(default=())
    startup: dict[str, Any] = field(default_factory=dict)  # startup.jsonl's last line

    @property
    def job_id(self) -> str:
        return str(self.jobs[-1]["job_id"]) if self.jobs else ""

    @property
    def site(self) -> str:
        return str(self.record.get("site", ""))

    @property
    def identity(self) -> JobIdentity | None:
        return from_jobs(str(self.run_dir), self.jobs)

    @property
    def is_local(self) -> bool:
        """Runs of a local-scheduler site (whatever its name) have a pid, not a Slurm job id."""
        return self.record.get("scheduler") == "local" or self.site == "local"

    @property
    def scheduler(self) -> str:
        """The back end the run's job went to (``scheduler/backend.py backend_for``)."""
        return "local" if self.is_local else "slurm"


def _object(path: Path, problems: list[str], *, required: bool) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            problems.append(f"{path.name} is missing")
        return {}
    except (OSError, ValueError) as err:
        problems.append(f"{path.name} cannot be read ({type(err).__name__}: {err})")
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        problems.append(f"{path.name} is not JSON ({err})")
        return {}
    if not isinstance(data, dict):
        problems.append(f"{path.name} holds a {type(data).__name__}, not a JSON object")
        return {}
    return data


def read_record(run_dir: Path, doing: str) -> dict[str, Any]:
    """run.json read as ``status`` and ``resume`` read it (``_object``), for the commands that
    need the record itself (export, eval): an empty, truncated or non-UTF-8 file or one that
    holds no JSON object refuses them in the line resume gives, not a JSONDecodeError,
    AttributeError or UnicodeDecodeError traceback."""
    problems: list[str] = []
    record = _object(run_dir / RUN_JSON, problems, required=True)
    if problems:
        raise UserError(f"run {run_dir.name} cannot be {doing}: {problems[0]}", field="run",
                        hint="`hpc-grpo status` shows what is wrong with it")
    return record


def _jobs(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    except OSError as err:
        problems.append(f"{path.name} cannot be read ({type(err).__name__}: {err})")
        return []
    jobs = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):  # the last line may be being written right now
                problems.append(f"{path.name} line {number} is not JSON")
            continue
        if isinstance(entry, dict) and isinstance(entry.get("job_id"), str | int) \
                and not isinstance(entry.get("job_id"), bool):
            jobs.append(entry)
        else:
            problems.append(f"{path.name} line {number} has no job_id")
    return jobs


def _number(source: str, data: dict[str, Any], key: str, problems: list[str]) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{source}: {key} is {json.dumps(value)[:40]}, not a number")
        return None
    return float(value)


def _text(source: str, data: dict[str, Any], key: str, problems: list[str]) -> str:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value or ""
    problems.append(f"{source}: {key} is {json.dumps(value)[:40]}, not text")
    return ""


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _stalled(state: dict[str, Any], problems: list[str]) -> tuple[str, tuple[int, ...]]:
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


def _progress(record: dict[str, Any], state: dict[str, Any], recent: list[dict[str, Any]],
              problems: list[str]) -> Progress:
    metrics = recent[-1] if recent else {}
    # a step that trained on an earlier step's generation logs no reward (steps_per_generation)
    rewarded: dict[str, Any] = next(
        (row for row in reversed(recent) if row.get("reward_mean") is not None), {})
    phase = state.get("phase", "")
    if not isinstance(phase, str):
        problems.append(f"{STATE_JSON}: phase is {json.dumps(phase)[:40]}, not a word")
        phase = ""
    config = record.get("grpo_config", {})
    if not isinstance(config, dict):
        problems.append(f"{RUN_JSON}: grpo_config is not an object")
        config = {}
    step = _number(METRICS_JSONL, metrics, "step", problems)
    state_step = _number(STATE_JSON, state, "step", problems)
    step = state_step if step is None else step
    # TRL's -1 (train by epochs) is no total: the trainer's own count arrives with the first step
    max_steps = next((n for n in (_number(STATE_JSON, state, "max_steps", problems),
                                  _number(RUN_JSON, config, "max_steps", problems))
                      if n is not None and n > 0), None)
    stalled, stalled_ranks = _stalled(state, problems)
    return Progress(
        phase=phase, step=int(step or 0), max_steps=int(max_steps or 0),
        reward=_number(METRICS_JSONL, rewarded, "reward_mean", problems),
        tokens_per_s=_number(METRICS_JSONL, metrics, "tokens_per_s", problems),
        checkpoint_step=_whole(_number(STATE_JSON, state, "last_checkpoint_step", problems)),
        checkpoint_time=_number(STATE_JSON, state, "last_checkpoint_time", problems),
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
    problems: list[str] = []
    if not run_dir.is_dir():
        problems.append("the run directory is gone")
    record = _object(run_dir / RUN_JSON, problems, required=run_dir.is_dir())
    run_id = record.get("run_id")
    state = _object(run_dir / STATE_JSON, problems, required=False)
    # RECENT lines (a GPU run's line is about 0.7 kB: rewards, memory, phases; where they are
    # longer the tail is simply shorter): enough to hold drift.WINDOW lines with a reward and a
    # log-prob difference when one generation trains many steps and only its first logs them.
    recent = rundir.tail_jsonl(run_dir / METRICS_JSONL, RECENT, tail_bytes=RECENT * 1024)
    metrics = recent[-1] if recent else {}
    jobs = _jobs(run_dir / JOBS_JSONL, problems)
    progress = _progress(record, state, recent, problems)
    return RunFiles(
        run_id=run_id if isinstance(run_id, str) and run_id else run_dir.name,
        run_dir=run_dir, record=record, jobs=jobs, state=state, last_metrics=metrics,
        restarts=rundir.read_jsonl(run_dir / RESTARTS_JSONL),
        progress=progress, problems=tuple(problems),
        startup=rundir.last_jsonl(run_dir / STARTUP_JSONL),
    )


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def newest_checkpoint_step(run_dir: Path) -> int | None:
    """The step of the newest checkpoint the ranks marked complete (the one a new job resumes
    from: the ranks pick it by the same marker); None when there is none."""
    try:
        entries = list((run_dir / CHECKPOINTS).iterdir())
    except OSError:
        return None
    steps = [int(m.group(1)) for p in entries if (m := _CHECKPOINT.match(p.name))
             and (p / CHECKPOINT_MARKER).is_file()]
    return max(steps, default=None)
