"""A run's job state: from Slurm's records that are this run's own, else from its run directory.

Slurm can only speak for a run while it still holds the run's job. Once it forgot the job
(accounting purged, no slurmdbd), once the job id names another job (a restarted cluster, wrapped
ids), when the run was submitted on another cluster sharing this home directory, or when Slurm
cannot be asked at all, the run directory still knows how far training got: the state then
comes from there, marked as such, and never from whatever job now has the number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hpc_grpo.rundir.contract import CANCELLED, CHECK, NODE_FAILURE
from hpc_grpo.rundir.view import RunView
from hpc_grpo.scheduler.identity import Match, match
from hpc_grpo.scheduler.slurm_records import (
    STATE_MEANINGS,
    JobRecord,
    JobRecords,
    JobState,
    combine,
    fold_sacct,
)

Source = Literal["slurm", "run directory", "local"]


@dataclass(frozen=True)
class JobView:
    state: JobState
    source: Source
    note: str = ""
    attempts: tuple[str, ...] = ()  # sacct's end state of each attempt, oldest first (runs/attempts.py)


# The run states status shows beside Slurm's job states (STATE_MEANINGS): REQUEUING is a run
# whose job Slurm will start again, after a fault or a requeue, however its last attempt ended.
REQUEUING = "REQUEUING"


def requeuing(view: JobView, files: RunView) -> str:
    """"REQUEUING: node failure at step 3, Slurm will restart it" where the run waits for Slurm
    to start its job again, else "". A surviving rank's "failed: ... gloo ... Connection closed
    by peer" with 0 requeues read as final (#58) while Slurm was bringing the run back.

    Slurm says so: the job REQUEUED (REQUEUE_HOLD and the other requeue states fold into it),
    PENDING again after a restart, or COMPLETING after a node failure (Slurm counts the restart
    at once; the job script always asks ``--requeue``). Or the node task says so: its requeue
    after a crash (retries.jsonl, ``RunView.due_retry``) is newer than the attempt, while Slurm
    has not ended the job (sacct's NODE_FAIL lags a requeue) or cannot be asked."""
    js, state, retry = view.state, files.state, files.due_retry
    if view.source == "local" or training_ended(files) or was_cancelled(files):
        return ""
    by_slurm = js.state == "REQUEUED" or (js.state == "PENDING" and js.restarts > 0) or (
        js.state == "COMPLETING" and state.stop_cause == NODE_FAILURE)
    by_node = retry is not None and (not js.finished or js.state == "NODE_FAIL"
                                     or view.source == "run directory")
    if not (by_slurm or by_node):
        return ""
    cause = (retry.cause if retry else "") or state.stop_cause or "requeued"
    resume = f" from its checkpoint at step {retry.checkpoint_step}" if retry and \
        retry.checkpoint_step else ""
    if "held" in js.reason.lower():  # REQUEUE_HOLD, JobHeldUser/Admin: nothing starts it alone
        return (f"{REQUEUING}: {cause} at step {state.step}, held by Slurm ({js.reason}): "
                f"`scontrol release {js.job_id}` lets it start{resume}")
    return f"{REQUEUING}: {cause} at step {state.step}, Slurm will restart it{resume}"


def _state(job_id: str, state: str, finished: bool, meaning: str, nodes: str = "") -> JobState:
    return JobState(job_id, state, finished, meaning, nodes, "", "", 0, "")


def training_ended(files: RunView) -> bool:
    """The run directory says the payload finished (training done, or every check written)."""
    phase = files.state.phase
    return phase == "done" or (files.head.payload == "check" and phase != "failed"
                               and (files.run_dir / CHECK).exists())


def was_cancelled(files: RunView) -> bool:
    """The current job was cancelled: ``hpc-grpo cancel`` recorded it in jobs.jsonl, or the node
    task named the stop "cancelled" (a scancel outside hpc-grpo) in state.json."""
    state = files.state
    return files.cancelled or (state.phase == "interrupted" and state.stop_cause == CANCELLED
                               and _stopped_by_this_job(files))


def from_run_dir(files: RunView, job_id: str, *, over: bool, why: str) -> JobView:
    """What the run directory says, for a job Slurm cannot speak for. `over`: the job is known
    to have left Slurm (its id now names another job on the same cluster)."""
    phase = files.state.phase or "not started"
    if training_ended(files):
        state = _state(job_id, "COMPLETED", True, "training ended (from the run directory)")
    elif files.state.phase == "failed":
        state = _state(job_id, "FAILED", True, "training failed (from the run directory)")
    elif was_cancelled(files):
        state = _state(job_id, "CANCELLED", True, f"cancelled; training stopped at phase {phase} "
                                                   "(from the run directory)")
    elif over:
        state = _state(job_id, "ENDED", True, f"the job is gone; training stopped at phase {phase}")
    else:
        state = _state(job_id, "UNKNOWN", False, f"Slurm cannot tell; the run directory says "
                                                 f"phase {phase}")
    return JobView(state, "run directory", f"{why}: state from the run directory")


def local_view(files: RunView, alive: bool) -> JobView:
    """A local run's state: RUNNING while its job's process lives (the back end tells), else
    what the run directory says."""
    job_id = files.job_id
    if job_id and alive:
        state = "RUNNING"
    elif training_ended(files):
        state = "COMPLETED"
    elif files.state.phase != "failed" and was_cancelled(files):
        return JobView(_state(job_id, "CANCELLED", True, CANCELLED_LOCAL, "localhost"), "local")
    elif files.state.phase == "interrupted" and _stopped_by_this_job(files):
        return JobView(_state(job_id, "ENDED", True, INTERRUPTED_LOCAL, "localhost"), "local")
    else:
        state = "FAILED"
    finished, meaning = STATE_MEANINGS[state]
    return JobView(_state(job_id, state, finished, meaning, "localhost"), "local")


def _stopped_by_this_job(files: RunView) -> bool:
    """state.json's attempt started after the current job was submitted: the phase is its own
    (cancel, the time limit or a signal; exit 0). A resume that died before its rank 0 wrote
    the phase leaves the previous job's ``interrupted`` there: that job stopped, this one failed."""
    submitted = files.submitted.time if files.submitted else None
    started = files.state.started
    return submitted is not None and started is not None and started >= submitted


CANCELLED_LOCAL = ("cancelled (hpc-grpo cancel); hpc-grpo resume RUN continues it from its "
                   "newest complete checkpoint")
# A local run has no requeue: its ranks saved a checkpoint and stopped, and nothing failed.
INTERRUPTED_LOCAL = ("stopped at a checkpoint (cancel, its time limit or a signal); "
                     "hpc-grpo resume RUN continues it")


def slurm_view(files: RunView, records: JobRecords) -> JobView:
    """This run's state from one batched query, using only the records that are its job's."""
    identity = files.identity
    if identity is None or not identity.job_id:
        return from_run_dir(files, "", over=False, why="no job recorded in jobs.jsonl")
    job_id = identity.job_id
    if records.unreachable is not None:
        return from_run_dir(files, job_id, over=False,
                            why=f"Slurm unreachable ({records.unreachable.message})")
    ours: list[JobRecord] = []
    live: JobRecord | None = None
    likely = silent = ""  # why a record was taken without proof; why one said nothing
    refused: list[tuple[Match, JobRecord]] = []
    found = list(records.acct.get(job_id, ()))
    queued = records.queue.get(job_id)
    for record in [*found, *([queued] if queued else [])]:
        verdict = match(identity, record)
        if verdict.verdict == "unsure":  # e.g. sacct's record of a pending job: no evidence
            silent = verdict.why
        elif verdict.verdict in ("ours", "likely"):
            likely = likely or (verdict.why if verdict.verdict == "likely" else "")
            if record is queued:
                live = record
            else:
                ours.append(record)
        else:
            refused.append((verdict, record))
    if ours or live:
        state = combine(job_id, fold_sacct(ours) if ours else None,
                        live.state if live else None)
        attempts = tuple(r.state.state for _, r in sorted(enumerate(ours), key=lambda p: (p[1].submit, p[0])))
        notes = [f"not confirmed as this run's job: {likely}" if likely else "", partial(records)]
        return JobView(state, "slurm", "; ".join(n for n in notes if n), attempts)
    elsewhere = [m for m, _ in refused if m.verdict == "elsewhere"]
    if elsewhere:
        return from_run_dir(files, job_id, over=False, why=elsewhere[-1].why)
    if refused:
        verdict, record = refused[-1]
        same_cluster = bool(identity.cluster) and identity.cluster == record.cluster
        return from_run_dir(files, job_id, over=same_cluster, why=verdict.why)
    why = silent or f"Slurm no longer knows job {job_id}"
    if records.sacct_error is not None:
        why = f"squeue no longer has job {job_id} and sacct failed ({records.sacct_error.message})"
    elif records.squeue_error is not None:
        why = f"sacct has no record of job {job_id} and squeue failed ({records.squeue_error.message})"
    return from_run_dir(files, job_id, over=False, why=why)


def partial(records: JobRecords) -> str:
    """What is missing from a state when one of sacct and squeue answered and the other did not
    (hung past STATUS_WAIT_S or failed): "" when both answered."""
    if records.sacct_error is not None:
        return (f"sacct did not answer ({records.sacct_error.message}): the state is squeue's, "
                "without the exit code and the requeue count")
    if records.squeue_error is not None:
        return (f"squeue did not answer ({records.squeue_error.message}): the state is sacct's, "
                "which lags Slurm's own by seconds")
    return ""
