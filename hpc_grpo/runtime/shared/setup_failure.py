"""Did the ranks fail before the first step in a way a retry would only repeat? Then it is a
configuration error, never retried.

Two rules, from what the ranks report (``common_error``): every rank raised the same line (a
value TRL refuses in GRPOConfig's ``__post_init__``, a dataset without its column, a CUDA
kernel missing for this GPU), unless its kind may pass on another try (an OSError: the hub or a
file system; out of memory; a collective's timeout); or some rank raised an error of code or
environment in setup, ImportError (flash-attn not installed, a reward module raising at import),
AttributeError or TypeError, which no retry cures whatever the other ranks did (issue #27: such
an ImportError on every rank was recorded "task crash" and retried twice). One rank failing
otherwise (a bad GPU, a node's full disk) is not one, and is retried as before.

The ranks compare notes through the shared run directory, never through a collective: a rank
that failed cannot join one that its peers are blocked in, and a healthy run never waits for
this. Each failing rank writes ``setup-errors/rank-<N>.json`` and stays alive until rank 0 has
decided (so no early exit makes torchrun kill a peer before it reaches the same error); rank 0
waits for every rank's record, decides with ``common_error`` and writes state.json, which
releases the others. Stdlib only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract

WAIT_S = 60.0  # how long rank 0 waits for its peers' records: the skew between ranks at setup
POLL_S = 0.5


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message``: what status shows and what ranks compare."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# Errors of code or environment in setup: a retry raises them again, on one rank or all.
ALWAYS_AGAIN = (ImportError, AttributeError, TypeError)  # ModuleNotFoundError is an ImportError
# Names of errors that may pass on another try even when every rank raised them alike.
TRANSIENT_NAMES = ("OutOfMemoryError", "DistBackendError", "DistNetworkError", "DistStoreError",
                   "TimeoutError")


def looks_like_configuration(exc: BaseException) -> bool:
    """Whether ``exc`` on every rank alike is a configuration error: anything but an error that
    may pass on another try, an OSError (a hub or file system failing, a connection), out of
    memory, or a collective's timeout or network error."""
    if isinstance(exc, OSError | MemoryError | TimeoutError):
        return False
    return type(exc).__name__ not in TRANSIENT_NAMES and "out of memory" not in str(exc).lower()


def common_error(records: Sequence[Mapping[str, Any]], world_size: int, attempt: str) -> str:
    """The configuration error's line for ``attempt``, else "" (see the module docstring):
    every rank recorded the same line of a kind a retry would not cure, or some rank recorded
    an ImportError, AttributeError or TypeError (``always``; rank 0's first where several)."""
    mine = {r.get("rank"): r for r in records if r.get("attempt") == attempt}
    for rank in sorted(r for r in mine if isinstance(r, int)):
        if mine[rank].get("always") is True:
            return str(mine[rank].get("line"))
    if set(mine) != set(range(world_size)):
        return ""
    lines = {str(r.get("line")) for r in mine.values()}
    if len(lines) != 1 or not all(r.get("configuration") is True for r in mine.values()):
        return ""
    return lines.pop()


def record(run_dir: Path, attempt: str, rank: int, exc: BaseException) -> dict[str, Any]:
    entry = {"attempt": attempt, "rank": rank, "line": exception_line(exc),
             "configuration": looks_like_configuration(exc),
             "always": isinstance(exc, ALWAYS_AGAIN), "time": time.time()}
    rundir.write_json_atomic(run_dir / contract.SETUP_ERRORS / f"rank-{rank}.json", entry)
    return entry


def records(run_dir: Path, attempt: str) -> list[dict[str, Any]]:
    """This attempt's records (an earlier attempt's files are overwritten rank by rank)."""
    folder = run_dir / contract.SETUP_ERRORS
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.startswith("rank-"))
    except FileNotFoundError:
        return []
    found = [rundir.read_json(folder / name) for name in names]
    return [r for r in found if isinstance(r, dict) and r.get("attempt") == attempt]


def _wait(done: Callable[[], bool], timeout_s: float, poll_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def settle(run_dir: Path, attempt: str, rank: int, world_size: int, exc: BaseException,
           wait_s: float = WAIT_S, poll_s: float = POLL_S) -> str:
    """Record this rank's error and wait for the verdict; returns the configuration error's
    line ("" when it is not one). Rank 0 writes it to state.json: phase failed, the line as
    message, stop_cause CONFIGURATION_ERROR where every rank agreed."""
    mine = record(run_dir, attempt, rank, exc)
    if rank != 0:  # released by rank 0's state.json, or by the clock if rank 0 never failed
        def decided() -> bool:
            state = rundir.load_state(run_dir)
            return state.is_attempt(attempt) and state.phase == "failed"

        _wait(decided, wait_s + 10 * poll_s, poll_s)
        state = rundir.load_state(run_dir)
        agreed = state.stop_cause == contract.CONFIGURATION_ERROR and decided()
        return state.message if agreed else ""
    found: list[dict[str, Any]] = [mine]

    def everyone() -> bool:
        found[:] = records(run_dir, attempt)
        return len({r.get("rank") for r in found}) >= world_size

    _wait(everyone, wait_s, poll_s)
    line = common_error(found, world_size, attempt)
    rundir.update_state(run_dir, phase="failed", message=line or mine["line"],
                        stop_cause=contract.CONFIGURATION_ERROR if line else None)
    return line
