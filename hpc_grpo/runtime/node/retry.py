"""Whether to requeue a failed run: pure decisions, values in and values out (why it stopped:
runtime/node/causes.py).

A signalled stop (preemption, time limit, a user's USR2) checkpoints and is requeued by
submitit. A crash (a node's processes killed, a node lost) is requeued here, from the newest
complete checkpoint, a bounded number of times: retrying forever on a deterministic crash is a
bug, so two failures at the same checkpoint end the run, and a configuration error (every rank
raised the same error before the first step) is never retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir.contract import CONFIGURATION_ERROR
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.shared.setup_failure import common_error


@dataclass(frozen=True)
class RetryDecision:
    requeue: bool
    reason: str


def configuration_error(state: RunState, attempt: str,
                        records: Sequence[Mapping[str, Any]] = (), world_size: int = 0) -> str:
    """The exception line when this attempt failed before the first step in a way a retry would
    repeat, else "": rank 0's verdict in state.json, or else the ranks' own ``setup-errors/``
    ``records`` (runtime/shared/setup_failure.py ``common_error``), which decide where rank 0
    could not: a peer's ImportError while rank 0 went on (and hung in the first collective), or
    rank 0 killed before it wrote. A rank writes a record only before its first step."""
    if state.is_attempt(attempt) and state.phase == "failed" \
            and state.stop_cause == CONFIGURATION_ERROR:
        return state.message or "every rank failed alike before the first step"
    return common_error(records, world_size, attempt) if records and world_size else ""


RESOURCE_CAUSES = ("out of memory", "disk full")  # node/oom.py, rank/checkpoints/folders.py


def repeated_resource_failure(earlier: Sequence[Mapping[str, Any]], checkpoint_step: int,
                              cause: str) -> str:
    """Why not to retry an OOM kill or a full disk that already ended an attempt from the same
    checkpoint (the same steps again would end the same way), else ""."""
    if cause not in RESOURCE_CAUSES:
        return ""
    if any(e.get("cause") == cause and int(e.get("checkpoint_step", -1)) == checkpoint_step
           for e in earlier):
        return (f"{cause} twice from checkpoint step {checkpoint_step}: deterministic, not "
                "retried")
    return ""


def decide_retry(earlier: Sequence[Mapping[str, Any]], checkpoint_step: int,
                 max_retries: int, config_error: str = "", cause: str = "") -> RetryDecision:
    """Requeue after a crash unless it is a configuration error, retries are spent, the run
    makes no progress, or an OOM kill / full disk repeats from the same checkpoint."""
    if config_error:
        return RetryDecision(False, f"{CONFIGURATION_ERROR}, not retried: {config_error}")
    if repeated := repeated_resource_failure(earlier, checkpoint_step, cause):
        return RetryDecision(False, repeated)
    if len(earlier) >= max_retries:
        return RetryDecision(False, f"{len(earlier)} automatic retries spent (max {max_retries})")
    same = sum(1 for e in earlier if int(e.get("checkpoint_step", -1)) == checkpoint_step)
    if same >= 2:
        return RetryDecision(
            False, f"failed {same + 1} times from checkpoint step {checkpoint_step}: no progress, "
            "likely a deterministic crash")
    return RetryDecision(True, f"retry {len(earlier) + 1} of {max_retries} from step {checkpoint_step}")
