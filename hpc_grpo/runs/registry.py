"""The run registry: run directories, created atomically, and an index of where they are.

A run directory appears complete or not at all (written under a temporary name, then renamed),
so a failed submit never leaves a half-written run behind. The index (one line per run) lets
``status`` find runs spread over several sites' output roots without scanning file systems.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError, did_you_mean


def home_dir() -> Path:
    """Per-user state: the run index. ``HPC_GRPO_HOME`` moves it (tests, shared accounts)."""
    return Path(os.environ.get("HPC_GRPO_HOME", "~/.local/share/hpc-grpo")).expanduser()


def index_path() -> Path:
    return home_dir() / "runs.jsonl"


def next_run_id(root: Path, base: str) -> str:
    """``base-0001``, ``base-0002``...: the next number not yet used under ``root``."""
    pattern = re.compile(rf"^{re.escape(base)}-(\d+)$")
    used = [int(m.group(1)) for p in root.glob(f"{base}-*") if (m := pattern.match(p.name))]
    return f"{base}-{max(used, default=0) + 1:04d}"


@contextmanager
def create_run_dir(root: Path, run_id: str, files: Mapping[str, str]) -> Iterator[Path]:
    """Write ``files`` into a new run directory atomically; remove it if the body raises.

    The body is the submission: if it fails, the directory goes with it, so nothing is left
    that looks like a run but has no job.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / run_id
    if final.exists():
        raise UserError(f"run directory {final} already exists", field="run_id",
                        hint="choose another --run-id")
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}.", dir=root))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        for sub in ("logs", "submitit", "checkpoints"):
            (tmp / sub).mkdir()
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        yield final
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise


def record_job(run_dir: Path, job_id: str, event: str, **extra: Any) -> None:
    line = {"job_id": job_id, "event": event, "time": time.time(), **extra}
    with (run_dir / "jobs.jsonl").open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def register(run_id: str, run_dir: Path) -> None:
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps({"run_id": run_id, "run_dir": str(run_dir)}) + "\n")


def indexed_runs() -> dict[str, Path]:
    """Run id -> directory for every registered run that still exists, oldest first."""
    path = index_path()
    runs: dict[str, Path] = {}
    if not path.exists():
        return runs
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        run_dir = Path(entry["run_dir"])
        if (run_dir / "run.json").exists():
            runs[entry["run_id"]] = run_dir
    return runs


def find_run(name: str) -> Path:
    """A run by id, by unique id prefix, or by directory path."""
    as_path = Path(name).expanduser()
    if (as_path / "run.json").exists():
        return as_path.resolve()
    runs = indexed_runs()
    if name in runs:
        return runs[name]
    matches = [r for r in runs if r.startswith(name)]
    if len(matches) == 1:
        return runs[matches[0]]
    raise UserError(f"no run '{name}'", field="run", hint=did_you_mean(name, runs))


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written right now
    return out


def last_jsonl(path: Path, tail_bytes: int = 4096) -> dict[str, Any]:
    """The last complete line, reading only the file's end (metrics grow with every step)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail_bytes))
            chunk = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return {}
    for line in reversed(chunk.splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    return {}


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

    @property
    def job_id(self) -> str:
        return str(self.jobs[-1]["job_id"]) if self.jobs else ""

    @property
    def site(self) -> str:
        return str(self.record.get("site", ""))


def read_run(run_dir: Path) -> RunFiles:
    record = read_json(run_dir / "run.json")
    return RunFiles(
        run_id=str(record.get("run_id", run_dir.name)),
        run_dir=run_dir,
        record=record,
        jobs=read_jsonl(run_dir / "jobs.jsonl"),
        state=read_json(run_dir / "state.json"),
        last_metrics=last_jsonl(run_dir / "metrics.jsonl"),
        restarts=read_jsonl(run_dir / "restarts.jsonl"),
    )


def measured_timings(job_name: str, site: str) -> tuple[float, float, str] | None:
    """(checkpoint seconds, step seconds, run id) from the newest run of this job on this site.

    Reads only the index and the candidates' small state files, newest first.
    """
    for run_id, run_dir in reversed(list(indexed_runs().items())):
        if not run_id.startswith(f"{job_name}-"):
            continue
        record = read_json(run_dir / "run.json")
        state = read_json(run_dir / "state.json")
        if record.get("site") != site or not state.get("checkpoint_seconds"):
            continue
        step = float(last_jsonl(run_dir / "metrics.jsonl").get("step_time") or 0.0)
        return float(state["checkpoint_seconds"]), step, run_id
    return None
