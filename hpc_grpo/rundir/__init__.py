"""Reading run.json and writing the runtime's files in the run directory (stdlib only).

Every JSON file is written to a temporary name and renamed, so a reader (the launcher's
`status`, a restarted rank) never sees half a file, even if the writer is killed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import (
    LOGS,
    PHASES,
    RANK_LOG,
    RUN_JSON,
    STATE_JSON,
    STOP_REQUEST,
    ContractError,
    RunRecord,
)
from hpc_grpo.rundir.state import STATE_FIELDS, RunState


def load_run(run_dir: str | os.PathLike[str]) -> RunRecord:
    """The launcher's run.json, typed; a missing or broken file is one clear error, not a
    KeyError later."""
    path = Path(run_dir) / RUN_JSON
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run directory?") from exc
    except ValueError as exc:
        raise ContractError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ContractError(f"{path}: expected a JSON object")
    return RunRecord.from_dict(data)


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write JSON through a temporary file in the same folder and rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file's content, or None if it is absent or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_state(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """state.json as a dict ({} before the first write)."""
    return read_json_object(Path(run_dir) / STATE_JSON)


def load_state(run_dir: str | os.PathLike[str]) -> RunState:
    """state.json typed (``RunState``): the defaults before the first write."""
    return RunState.from_dict(read_state(run_dir))


def update_state(run_dir: str | os.PathLike[str], **fields: Any) -> dict[str, Any]:
    """Merge fields into state.json (rank 0 only: it is the single writer)."""
    if "phase" in fields and fields["phase"] not in PHASES:
        raise ValueError(f"unknown phase {fields['phase']!r}")
    unknown = sorted(set(fields) - STATE_FIELDS)
    if unknown:
        raise ValueError(f"not state.json fields (rundir/state.py RunState): {unknown}")
    state = read_state(run_dir)
    state.update(fields)
    state["updated"] = time.time()
    write_json_atomic(Path(run_dir) / STATE_JSON, state)
    return state


def append_jsonl(path: str | os.PathLike[str], obj: Mapping[str, Any]) -> None:
    """Append one line; one write call per line so a crash leaves at most one partial line."""
    with open(path, "a") as fh:
        fh.write(json.dumps(dict(obj), sort_keys=True) + "\n")


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON object lines of a file; others (a torn last line, one being written right
    now) are skipped; [] when the file is absent or unreadable."""
    try:
        return _json_objects(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return []


def _json_objects(lines: list[str]) -> list[dict[str, Any]]:
    """The lines that are JSON objects, parsed, in order; any other line is skipped."""
    rows: list[dict[str, Any]] = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object file's content; {} if it is absent, unreadable or not an object."""
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def finite_number(value: Any) -> float | None:
    """A JSON value as a float where it is a finite number; None for a bool, NaN, an infinity,
    an integer too large for a float or anything else (files the ranks wrote, read back)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def tail_jsonl(path: str | os.PathLike[str], lines: int, tail_bytes: int = 4096) -> list[dict[str, Any]]:
    """Up to ``lines`` last complete JSON-object lines, oldest first, reading only the file's
    last ``tail_bytes`` (metrics grow with every step; a line cut at the start is skipped)."""
    try:
        with Path(path).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail_bytes))
            chunk = handle.read().decode(errors="replace")
    except OSError:
        return []
    rows = _json_objects(chunk.splitlines())  # at most tail_bytes of them
    return rows[-lines:] if lines > 0 else []


def last_jsonl(path: str | os.PathLike[str], tail_bytes: int = 4096) -> dict[str, Any]:
    """The last complete line, reading only the file's end (metrics grow with every step)."""
    rows = tail_jsonl(path, 1, tail_bytes)
    return rows[-1] if rows else {}


def truncate_metrics(path: str | os.PathLike[str], last_step: int) -> int:
    """Keep only metric lines up to last_step, so a resumed run logs every step exactly once.

    Steps after the checkpoint we resume from were trained by an attempt that died before its
    next save; they are trained again and must not appear twice. Returns lines dropped.
    """
    target = Path(path)
    if not target.exists():
        return 0
    rows = read_jsonl(target)
    kept = [r for r in rows if int(r.get("step", 0)) <= last_step]
    dropped = len(rows) - len(kept)
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, target)
    return dropped


def request_stop(run_dir: str | os.PathLike[str], reason: str, signal: str = "",
                 attempt: str = "") -> Path:
    """Create the stop-request file that every rank polls at each step end. ``signal``: the
    signal the node task turned into this request (its cause is then the node task's to name);
    empty for a request made for its own sake (``stop.request_cause``). ``attempt``: the
    attempt the request is for (the node task's), kept by that attempt's ranks however early
    it came (``consume_stale_stop_request``)."""
    path = Path(run_dir) / STOP_REQUEST
    record: dict[str, Any] = {"reason": reason, "time": time.time(), "pid": os.getpid()}
    if signal:
        record["signal"] = signal
    if attempt:
        record["attempt"] = attempt
    path.write_text(json.dumps(record) + "\n")
    return path


def consume_stale_stop_request(run_dir: str | os.PathLike[str], started_at: float,
                               attempt: str = "") -> bool:
    """Move away a stop-request older than this attempt, so a resumed run does not stop at once.

    Kept and honoured at the first step end: a request for ``attempt`` (the node task's, which
    may come before this rank's interpreter started: a signal while torchrun starts, the
    rendezvous, a server's start), and one written after ``started_at`` (a person's, or one
    without an attempt). Returns True if a stale request was moved.
    """
    path = Path(run_dir) / STOP_REQUEST
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return False
    # a person's file (not JSON, or not a record) has no attempt: its age alone decides
    if mtime >= started_at or (attempt and read_stop_request(run_dir).attempt == attempt):
        return False
    logs = Path(run_dir) / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(path, logs / f"{STOP_REQUEST}.consumed-{int(mtime)}")
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class StopRequest:
    """A stop-request file, read: the node task's record (``request_stop``) or a person's words.
    ``reason`` is the record's reason or the first line a person wrote ("" none)."""

    reason: str = ""
    signal: str = ""  # the signal the node task turned into this request ("" none)
    attempt: str = ""  # the attempt it is for ("" a person's, or an older record)

    @classmethod
    def parse(cls, text: str) -> StopRequest:
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return cls(reason=text.strip().splitlines()[0] if text.strip() else "")
        return cls(reason=str(record.get("reason") or ""), signal=str(record.get("signal") or ""),
                   attempt=str(record.get("attempt") or ""))


def read_stop_request(run_dir: str | os.PathLike[str]) -> StopRequest:
    """The run's stop-request file, parsed (an empty request where it cannot be read: moved or
    removed between a check and the read is a request all the same)."""
    try:
        text = (Path(run_dir) / STOP_REQUEST).read_text(errors="replace")
    except OSError:
        text = ""
    return StopRequest.parse(text)


def redirect_output(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """Send this process's stdout/stderr (file descriptors too) to logs/rank-<rank>.log, appended.

    At the descriptor level, so C++ warnings (gloo, DeepSpeed) land in the same file.
    """
    path = Path(run_dir) / LOGS / RANK_LOG.format(rank=rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"==== {stamp} rank {rank} pid {os.getpid()} ====", flush=True)
    return path
