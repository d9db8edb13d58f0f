"""The run directory's ledgers, typed: what followed training (exports, evaluations, pushes,
export jobs) and each completed checkpoint save; their readers and (where a write is a plain
append) their one writer each.

saves.jsonl holds one line per completed save, appended by rank 0 when the checkpoint is marked
complete (runtime/rank/checkpoints/marker.py ``CheckpointMarkerCallback``): state.json keeps only the last
save's time, and `status RUN` sets each one beside the plan's prediction (run.json
``predicted_save_s``).

exports.jsonl holds one line per finished export (export/write.py), eval/ one JSON file per
evaluation (export/evaluate.py writes it whole), pushes.jsonl one line per push (export/push.py),
export-jobs.jsonl one line per `export` run as a job (export/side_job.py). `status` reads them
over many runs and must not stop at one odd file: every line is read tolerantly
(``RunState.from_dict``'s rule: a value not of its field's type takes the field's default, here
None where `status` shows a missing value as such), a line without what makes it one (an
export's folder, a push's repository, a job's id) is left out, and no reader raises. A recorded
export whose folder was removed since is not offered. Stdlib only, like the rest of the run
directory's room.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import append_jsonl, finite_number, load_state, read_json_object, read_jsonl
from hpc_grpo.rundir.contract import (
    EVAL_DIR,
    EXPORT_JOBS_JSONL,
    EXPORTS_JSONL,
    PUSHES_JSONL,
    SAVES_JSONL,
)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ExportLine:
    """One line of exports.jsonl: a finished, checked export folder. ``check`` is the runtime
    child's answer as written (runtime/posttrain/check.py; runs/after_training.py reads it)."""

    path: str = ""  # the folder
    time: float | None = None
    step: int | None = None
    layout: str | None = None  # full, zero, lora
    mode: str | None = None  # full, merged, adapter
    dtype: str | None = None  # as written: float32, bfloat16, "adapter's own dtype"
    check: Mapping[str, Any] = field(default_factory=dict)
    best_key: str = ""  # --best: the metrics key the step was picked by ("" not picked so)
    best_value: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportLine:
        best = _object(data.get("best"))
        return cls(path=_str(data.get("path")) or "", time=_float(data.get("time")),
                   step=_int(data.get("step")), layout=_str(data.get("layout")),
                   mode=_str(data.get("mode")), dtype=_str(data.get("dtype")),
                   check=_object(data.get("check")), best_key=_str(best.get("key")) or "",
                   best_value=_float(best.get("value")))

    def to_dict(self) -> dict[str, Any]:
        line = {"time": self.time, "step": self.step, "path": self.path, "layout": self.layout,
                "mode": self.mode, "dtype": self.dtype, "check": dict(self.check)}
        if self.best_key:
            line["best"] = {"key": self.best_key, "value": self.best_value}
        return line


@dataclass(frozen=True)
class EvalResult:
    """What `status` reads of one evaluation file of eval/ (the file holds more: per reward, per
    prompt, the example). The reward's mean and 95% interval are None where not numbers."""

    file: str
    time: float
    label: str | None = None  # subject.label: "step-4", "export step-4", a folder's name
    dataset: str | None = None  # dataset.name
    reward_mean: float | None = None
    reward_low: float | None = None
    reward_high: float | None = None
    prompts: int | None = None
    num_samples: int | None = None
    engine: str | None = None  # what generated: "vllm", "transformers"
    engine_note: str | None = None  # why not vLLM

    @classmethod
    def from_dict(cls, file: str, data: Mapping[str, Any]) -> EvalResult | None:
        """None where the file is no evaluation: no time, no reward object."""
        time, reward = _float(data.get("time")), data.get("reward")
        if time is None or not isinstance(reward, dict):
            return None
        return cls(file=file, time=time, label=_str(_object(data.get("subject")).get("label")),
                   dataset=_str(_object(data.get("dataset")).get("name")),
                   reward_mean=_float(reward.get("mean")), reward_low=_float(reward.get("low")),
                   reward_high=_float(reward.get("high")), prompts=_int(data.get("prompts")),
                   num_samples=_int(data.get("num_samples")), engine=_str(data.get("engine")),
                   engine_note=_str(data.get("engine_note")))


@dataclass(frozen=True)
class PushLine:
    """One line of pushes.jsonl: an export folder uploaded to the hub."""

    repo_id: str = ""
    time: float | None = None
    step: int | None = None
    path: str | None = None  # the export folder pushed
    url: str | None = None  # the commit's page
    commit: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PushLine:
        return cls(repo_id=_str(data.get("repo_id")) or "", time=_float(data.get("time")),
                   step=_int(data.get("step")), path=_str(data.get("path")),
                   url=_str(data.get("url")), commit=_str(data.get("commit")))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExportJobLine:
    """One line of export-jobs.jsonl: an `export` submitted as a job, and the back end it went
    to (``scheduler/backend.py backend_for``'s name)."""

    job_id: str = ""
    time: float | None = None
    scheduler: str | None = None
    script: str | None = None
    log: str | None = None
    step: int | None = None
    target: str | None = None  # the export folder the job writes
    mem_mb: int | None = None
    reason: str | None = None  # why a job: "--job", or the login node's memory

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportJobLine:
        return cls(job_id=_str(data.get("job_id")) or "", time=_float(data.get("time")),
                   scheduler=_str(data.get("scheduler")), script=_str(data.get("script")),
                   log=_str(data.get("log")), step=_int(data.get("step")),
                   target=_str(data.get("target")), mem_mb=_int(data.get("mem_mb")),
                   reason=_str(data.get("reason")))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def exports(run_dir: Path) -> list[ExportLine]:
    """exports.jsonl's lines whose folder still exists, oldest first."""
    lines = (ExportLine.from_dict(entry) for entry in read_jsonl(run_dir / EXPORTS_JSONL))
    return [line for line in lines if line.path and Path(line.path).is_dir()]


def newest_export(run_dir: Path) -> ExportLine | None:
    """The export made last (what `status` shows), or None."""
    found = exports(run_dir)
    return found[-1] if found else None


def furthest_export(run_dir: Path) -> ExportLine | None:
    """The export of the highest step, the last made among those (what `eval` takes), or None."""
    found = [e for e in exports(run_dir) if e.step is not None]
    return max(reversed(found), key=lambda e: int(e.step or 0)) if found else None


def append_export(run_dir: Path, line: ExportLine) -> None:
    append_jsonl(run_dir / EXPORTS_JSONL, line.to_dict())


def newest_eval(run_dir: Path) -> EvalResult | None:
    """The newest evaluation file of eval/ (by its recorded time, then its name), or None."""
    try:
        files = list((run_dir / EVAL_DIR).glob("*.json"))
    except OSError:
        return None
    found = [r for path in files if (r := EvalResult.from_dict(str(path), read_json_object(path)))]
    return max(found, key=lambda r: (r.time, r.file)) if found else None


def pushes(run_dir: Path) -> list[PushLine]:
    """pushes.jsonl's lines that name a repository, oldest first."""
    lines = (PushLine.from_dict(entry) for entry in read_jsonl(run_dir / PUSHES_JSONL))
    return [line for line in lines if line.repo_id]


def newest_push(run_dir: Path) -> PushLine | None:
    found = pushes(run_dir)
    return found[-1] if found else None


def append_push(run_dir: Path, line: PushLine) -> None:
    append_jsonl(run_dir / PUSHES_JSONL, line.to_dict())


def export_jobs(run_dir: Path) -> list[ExportJobLine]:
    """export-jobs.jsonl's lines that name a job, oldest first."""
    lines = (ExportJobLine.from_dict(entry) for entry in read_jsonl(run_dir / EXPORT_JOBS_JSONL))
    return [line for line in lines if line.job_id]


def newest_export_job(run_dir: Path) -> ExportJobLine | None:
    found = export_jobs(run_dir)
    return found[-1] if found else None


def next_export_job(run_dir: Path) -> int:
    """The number of the run's next export job (export-job-<N>.sh): one past every line of the
    ledger, a line without a job id included, so that no number is given twice."""
    return len(read_jsonl(run_dir / EXPORT_JOBS_JSONL)) + 1


def append_export_job(run_dir: Path, line: ExportJobLine) -> None:
    append_jsonl(run_dir / EXPORT_JOBS_JSONL, line.to_dict())


@dataclass(frozen=True)
class SaveLine:
    """One line of saves.jsonl: a checkpoint save rank 0 marked complete. ``seconds`` runs from
    the step's end to the marker, as state.json's ``checkpoint_seconds`` (taken a moment after
    that was written, so it may be a few milliseconds longer); ``held_s``,
    where recorded, is the training time the save held, below ``seconds`` for a save that
    writes while training goes on (None: the save held training all along)."""

    step: int
    seconds: float
    time: float | None = None
    attempt: str = ""
    held_s: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SaveLine | None:
        """None where the line is no save: no step, or no finite, non-negative seconds."""
        step, seconds = _int(data.get("step")), finite_number(data.get("seconds"))
        if step is None or seconds is None or seconds < 0:
            return None
        held = finite_number(data.get("held_s"))
        return cls(step=step, seconds=seconds, time=_float(data.get("time")),
                   attempt=_str(data.get("attempt")) or "",
                   held_s=held if held is not None and held >= 0 else None)

    def to_dict(self) -> dict[str, Any]:
        line = {"step": self.step, "seconds": self.seconds, "time": self.time,
                "attempt": self.attempt}
        if self.held_s is not None:
            line["held_s"] = self.held_s
        return line


def saves(run_dir: Path) -> list[SaveLine]:
    """saves.jsonl's saves, oldest first; lines that are no save are left out ([] in a run
    directory written before the ledger)."""
    return [line for entry in read_jsonl(run_dir / SAVES_JSONL)
            if (line := SaveLine.from_dict(entry)) is not None]


def append_save(run_dir: Path, *, step: int, seconds: float, held_s: float | None = None) -> None:
    """Rank 0, once a save is marked complete: its line, with the attempt state.json names
    (rank 0 wrote it at the attempt's start) and the time now."""
    append_jsonl(run_dir / SAVES_JSONL, SaveLine(
        step=step, seconds=seconds, time=time.time(), attempt=load_state(run_dir).attempt,
        held_s=held_s).to_dict())
