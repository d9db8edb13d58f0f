"""The run registry: run directories, created atomically, and an index of where they are.

A run directory appears complete or not at all (written under a temporary name, then renamed),
so a failed submit never leaves a half-written run behind. The index (one line per run) lets
``status`` find runs spread over several sites' output roots without scanning file systems.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.config import names
from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.rundir.checkpoints import folder_blocked
from hpc_grpo.rundir.contract import (
    ATTEMPTS,
    CHECKPOINTS,
    LOGS,
    RUN_JSON,
    SUBMITIT,
)
from hpc_grpo.rundir.steps import MeasuredStep, measure, measured_at, step_shape
from hpc_grpo.rundir.view import read_head, read_view


def home_dir() -> Path:
    """Per-user state: the run index. ``HPC_GRPO_HOME`` moves it (tests, shared accounts).
    One naming a file (or a path under one) is one line: every command read or appended
    runs.jsonl in it and stopped on a NotADirectoryError traceback (#58)."""
    home = Path(os.environ.get("HPC_GRPO_HOME", "~/.local/share/hpc-grpo")).expanduser()
    if where := folder_blocked(home):
        raise UserError(f"{home} {where}, not a directory", field="HPC_GRPO_HOME",
                        hint="set HPC_GRPO_HOME to a directory, new or existing, or unset it")
    return home


def index_path() -> Path:
    return home_dir() / "runs.jsonl"


def output_root(given: str | None, site_default: str) -> Path:
    """Where run directories go: ``--output-root``, else the site's, absolute. Refused in one
    line when it is a file or lies under one: create_run_dir's mkdir would fail only at submit,
    after the plan and its checks (FileExistsError, NotADirectoryError), and render would show a
    script whose run directory cannot exist."""
    root = Path(os.path.expandvars(given or site_default)).expanduser().resolve()
    if where := folder_blocked(root):
        raise UserError(f"output root {root} {where}, not a directory",
                        field="--output-root" if given else "output_root",
                        hint="give a directory, new or existing" if given
                        else "fix the site profile's output_root or pass --output-root")
    return root


def next_run_id(root: Path, base: str) -> str:
    """``base-0001``, ``base-0002``...: the next number not yet used under ``root``."""
    pattern = re.compile(rf"^{re.escape(base)}-(\d+)$")
    used = [int(m.group(1)) for p in root.glob(f"{base}-*") if (m := pattern.match(p.name))]
    return f"{base}-{max(used, default=0) + 1:04d}"


class RunIdTaken(UserError):
    """The run directory's name was taken, by a run before or by a submit running at the same
    time (``next_run_id`` looks, ``create_run_dir`` claims: another submit may claim between)."""


@contextmanager
def create_run_dir(root: Path, run_id: str, files: Mapping[str, str],
                   mode: int = 0o700) -> Iterator[Path]:
    """Write ``files`` into a new run directory atomically; remove it if the body raises.

    The directory gets ``mode`` (the user's only by default: logs and checkpoints may hold what
    others should not read) before it appears under its name.

    The body is the submission: if it fails, the directory goes with it, so nothing is left
    that looks like a run but has no job. A ``run_id`` that is not one directory name is refused
    before anything is made (names.py): ``root / run_id`` would be somewhere else.
    """
    names.check_run_id(run_id, "run_id")
    root.mkdir(parents=True, exist_ok=True)
    final = root / run_id
    taken = RunIdTaken(f"run directory {final} already exists", field="run_id",
                       hint="choose another --run-id")
    if final.exists():
        raise taken
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}.", dir=root))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        for sub in (LOGS, SUBMITIT, CHECKPOINTS):
            (tmp / sub).mkdir()
        os.chmod(tmp, mode)
        os.rename(tmp, final)  # a non-empty directory there: EEXIST or ENOTEMPTY, not replaced
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise taken from exc  # claimed since the look above, by a submit at the same time
        raise
    try:
        yield final
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def replace_run_files(run_dir: Path, files: Mapping[str, str], keep_as: str) -> Iterator[Path]:
    """Replace launcher files of an existing run (a resume's new job script and record), keeping
    the old ones in ``attempts/<keep_as>/``; each file is replaced atomically (a reader sees the
    old text or the new, never part of one). If the body (the submission) raises, the old files
    are put back and the copy removed: a failed resume leaves the run as it was."""
    kept = run_dir / ATTEMPTS / keep_as
    if kept.exists():
        raise UserError(f"{kept} already exists", field="resume",
                        hint="an earlier resume of this job was interrupted; move it away")
    kept.mkdir(parents=True)
    old = {name: (run_dir / name).read_text() for name in files if (run_dir / name).exists()}
    for name, text in old.items():
        (kept / name).write_text(text)
    try:
        for name, text in files.items():
            _write_atomic(run_dir / name, text)
        yield run_dir
    except BaseException:
        for name in files:
            if name in old:
                _write_atomic(run_dir / name, old[name])
            else:
                (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(kept, ignore_errors=True)
        with suppress(OSError):
            kept.parent.rmdir()  # only when no earlier attempt is kept there
        raise


def register(run_id: str, run_dir: Path) -> None:
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps({"run_id": run_id, "run_dir": str(run_dir)}) + "\n")


@dataclass(frozen=True)
class IndexedRun:
    """One index entry. Runs are told apart by directory: two output roots (or two checkouts)
    may each hold a run with the same id."""

    run_id: str
    run_dir: Path


def indexed_runs() -> list[IndexedRun]:
    """Every registered run whose directory still exists, once each, oldest registration first.

    A directory that exists without a readable run.json stays listed, so that ``status`` can say
    what is wrong with it; an unreadable index line is skipped."""
    path = index_path()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    runs: dict[str, IndexedRun] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("run_dir"), str):
            continue
        run_dir = Path(os.path.abspath(entry["run_dir"]))
        run_id = entry.get("run_id")
        runs.pop(str(run_dir), None)  # registered again: it moves to the end
        runs[str(run_dir)] = IndexedRun(run_id if isinstance(run_id, str) else run_dir.name,
                                        run_dir)
    return [run for run in runs.values() if run.run_dir.is_dir()]


def _ambiguous(name: str, runs: list[IndexedRun]) -> UserError:
    listed = ", ".join(f"{r.run_id} ({r.run_dir})" for r in runs)
    return UserError(f"'{name}' matches {len(runs)} runs: {listed}", field="run",
                     hint=f"name one by its directory, e.g. {runs[-1].run_dir}")


def find_run(name: str) -> Path:
    """A run by directory path, by id, or by unique id prefix; a name that fits several runs
    (the same id under two output roots) is refused with the list, never guessed."""
    as_path = Path(name).expanduser()
    if (as_path / RUN_JSON).exists():
        return as_path.resolve()
    runs = indexed_runs()
    for fits in (lambda r: r.run_id == name, lambda r: r.run_id.startswith(name)):
        found = [r for r in runs if fits(r)]
        if len(found) == 1:
            return found[0].run_dir
        if found:
            raise _ambiguous(name, found)
    if as_path.is_dir() and any(r.run_dir == Path(os.path.abspath(as_path)) for r in runs):
        return Path(os.path.abspath(as_path))  # an indexed run whose run.json is unreadable
    raise UserError(f"no run '{name}'", field="run",
                    hint=did_you_mean(name, {r.run_id for r in runs}))


def site_measurements(site: str) -> tuple[MeasuredStep, ...]:
    """What this site's past runs measured, one measurement per step-time shape, newest first:
    each shape's newest run with steady steps (rundir/steps.py ``measure``: the steady step, the
    slowest of those steps and the checkpoint's seconds). The planner takes both the plan's step
    time (planner/step_source.py) and its stop lead (planner/timing.py) from the one of the
    plan's shape. Reads run.json's head of every indexed run, and the typed view (run.json,
    state.json, the last metrics lines, restarts) of those on the site only."""
    found: list[MeasuredStep] = []
    for run in reversed(indexed_runs()):
        if read_head(run.run_dir).site != site:
            continue
        view = read_view(run.run_dir)
        if view.record is None or measured_at(step_shape(view.record), found) is not None:
            continue  # unreadable, or a newer run of the shape measured it
        measured = measure(view.record, view.run_id, view.recent_metrics,
                           (r.resumed_from_step for r in view.restarts),
                           view.state.checkpoint_seconds)
        if measured is not None:
            found.append(measured)
    return tuple(found)
