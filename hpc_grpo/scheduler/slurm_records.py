"""What Slurm's answers mean: the state table and the parsers of sacct and squeue output.

Pure (text in, values out), so the parsing is tested on canned text; ``scheduler/slurm.py`` runs
the commands, with the field lists defined here so the columns asked for and read cannot differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from hpc_grpo.errors import UserError

# state -> (finished, meaning). Only terminal states are finished: a PREEMPTED or REQUEUED job
# comes back, and COMPLETING is also what a job passes through while it is being requeued.
STATE_MEANINGS: Mapping[str, tuple[bool, str]] = MappingProxyType(
    {
        "PENDING": (False, "waiting in the queue for its nodes"),
        "RUNNING": (False, "running on its nodes"),
        "REQUEUED": (False, "requeued (checkpoint, preemption or scontrol requeue): starts again"),
        "PREEMPTED": (False, "preempted by a higher-priority job: Slurm requeues it"),
        "COMPLETING": (False, "ending: Slurm is cleaning up its processes (or requeueing it)"),
        "SUSPENDED": (False, "suspended by Slurm: it resumes later"),
        "TIMEOUT": (True, "stopped at its time limit"),
        "NODE_FAIL": (True, "stopped because one of its nodes failed"),
        "CANCELLED": (True, "cancelled (scancel or an administrator)"),
        "FAILED": (True, "ended with a non-zero exit code"),
        "COMPLETED": (True, "ended with exit code 0"),
        "OUT_OF_MEMORY": (True, "killed for using more memory than it was given"),
        "BOOT_FAIL": (True, "never started: its nodes failed to boot"),
        "DEADLINE": (True, "stopped at its deadline"),
        "UNKNOWN": (False, "not known to sacct or squeue (yet, or any more)"),
    }
)

# Slurm's rarer states (sacct and squeue print long names), folded into the states above.
_ALIASES = {
    "CONFIGURING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING",
    "STAGE_OUT": "COMPLETING", "STOPPED": "SUSPENDED", "REQUEUE_HOLD": "REQUEUED",
    "REQUEUE_FED": "REQUEUED", "SPECIAL_EXIT": "REQUEUED", "RESV_DEL_HOLD": "PENDING",
    "REVOKED": "CANCELLED",
}  # fmt: skip

# sacct 22.05 has no Restarts column: with --duplicates each requeue leaves an older record in one
# of these states, and counting them gives the restarts.
_RESTART_STATES = frozenset({"REQUEUED", "PREEMPTED", "NODE_FAIL"})
# The first seven columns say what a job is doing; the last three say whose it is (job ids repeat:
# see hpc_grpo/scheduler/identity.py). SubmitLine (sacct 22.05+) holds the script path sbatch got and
# comes last, so a '|' inside it cannot shift the other columns.
SACCT_FIELDS = "JobID,State,NodeList,Elapsed,ExitCode,Reason,Submit,JobName,Cluster,SubmitLine"
SACCT_FIELDS_BEFORE_22_05 = SACCT_FIELDS.removesuffix(",SubmitLine")
# squeue's --Format (not --format: only it has Cluster); "name:|" prints the field unpadded and
# '|' after it. Command (the script path of a batch job) comes last for the same reason.
SQUEUE_FORMAT = ",".join(
    [f"{f}:|" for f in ("JobID", "State", "NodeList", "TimeUsed", "Reason", "SubmitTime",
                         "Cluster", "Name")] + ["Command:"]
)
# What Slurm calls a job id (an array task: 12_3); anything else is refused or skipped.
JOB_ID = re.compile(r"\d+(_\d+)?")


@dataclass(frozen=True)
class JobState:
    """One job as Slurm sees it now, already normalised so callers never parse Slurm text."""

    job_id: str
    state: str
    finished: bool
    meaning: str
    nodes: str
    elapsed: str
    exit_code: str
    restarts: int
    reason: str


def normalise_state(raw: str) -> str:
    """A key of STATE_MEANINGS for any sacct/squeue state ("CANCELLED by 0", "RUNNING+")."""
    words = raw.strip().upper().split()
    word = words[0].rstrip("+") if words else ""
    word = _ALIASES.get(word, word)
    return word if word in STATE_MEANINGS else "UNKNOWN"


def _clean(value: str) -> str:
    value = value.strip()
    return "" if value in ("None", "None assigned", "(null)") else value


def _job_state(
    job_id: str, raw: str, nodes: str, elapsed: str, code: str, restarts: int, reason: str
) -> JobState:
    state = normalise_state(raw)
    nodes, elapsed, code, reason = (_clean(v) for v in (nodes, elapsed, code, reason))
    return JobState(job_id, state, *STATE_MEANINGS[state], nodes, elapsed, code, restarts, reason)


@dataclass(frozen=True)
class JobRecord:
    """One record Slurm holds under a job id: what the job does, and what tells whose it is.

    ``command`` is squeue's Command or sacct's SubmitLine: for a batch job, the script path sbatch
    was given (submitit names it ``.submission_file_<uuid>.sh``, fresh for every submission).
    Empty where Slurm does not say (older sacct, ``--wrap`` jobs).
    """

    job_id: str
    state: JobState
    submit: str = ""
    name: str = ""
    cluster: str = ""
    command: str = ""


def _record(cols: list[str], state: JobState, extra: list[str]) -> JobRecord:
    submit, name, cluster, command = (_clean(v) for v in (extra + ["", "", "", ""])[:4])
    return JobRecord(cols[0].strip(), state, submit, name, cluster, command)


def parse_sacct_records(text: str) -> dict[str, list[JobRecord]]:
    """Every allocation record of `sacct -X -D -o SACCT_FIELDS`, per job id, in sacct's order.

    Requeues leave one record each; a job id reused (restarted cluster, wrapped ids) leaves
    records of unrelated jobs under the same id: callers pick theirs by identity."""
    records: dict[str, list[JobRecord]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        job_id = cols[0].strip()
        if len(cols) < 7 or not job_id or "." in job_id:
            continue  # blank line, or a step record when -X was not honoured
        state = _job_state(job_id, cols[1], cols[2], cols[3], cols[4], 0, cols[5])
        extra = [cols[6], *cols[7:9], "|".join(cols[9:])]
        records.setdefault(job_id, []).append(_record(cols, state, extra))
    return records


def fold_sacct(records: Sequence[JobRecord]) -> JobState:
    """One job's state from its records: the newest (by Submit) wins, older requeues count."""
    ordered = sorted(enumerate(records), key=lambda pair: (pair[1].submit, pair[0]))
    *older, (_, newest) = ordered  # a requeue resets Submit, so the newest run sorts last
    restarts = sum(old.state.state in _RESTART_STATES for _, old in older)
    return replace(newest.state, restarts=restarts)


def parse_squeue_records(text: str) -> dict[str, JobRecord]:
    """Read `squeue --noheader --Format=SQUEUE_FORMAT` (no exit code nor restarts there)."""
    records: dict[str, JobRecord] = {}
    for line in text.splitlines():
        cols = line.strip().split("|", 8)
        if len(cols) >= 5 and cols[0]:
            state = _job_state(cols[0], cols[1], cols[2], cols[3], "", 0, cols[4])
            submit, cluster, name, command = (cols[5:] + ["", "", "", ""])[:4]
            records[cols[0]] = _record(cols, state, [submit, name, cluster, command])
    return records


@dataclass(frozen=True)
class SubmittedJob:
    """A job just submitted: its id, the script path sbatch got, and Slurm's first record of it
    (None if squeue could not be asked right then): what the run records to know its job later."""

    job_id: str
    script: str
    name: str
    record: JobRecord | None


@dataclass(frozen=True)
class JobRecords:
    """What one sacct and one squeue call said about some job ids, failures included.

    ``queue`` is slurmctld's live view (also jobs ended less than MinJobAge ago); ``acct`` the
    accounting records, several per id (requeues, reused ids)."""

    acct: Mapping[str, Sequence[JobRecord]]
    queue: Mapping[str, JobRecord]
    sacct_error: UserError | None = None
    squeue_error: UserError | None = None

    @property
    def unreachable(self) -> UserError | None:
        """sacct's error when neither command answered: nothing is known about any job."""
        return self.sacct_error if self.sacct_error and self.squeue_error else None


def combine(job_id: str, acct: JobState | None, live: JobState | None, why: str = "") -> JobState:
    """sacct is the record (exit code, restarts, old jobs) but lags slurmctld by seconds; squeue is
    slurmctld's live view, so it wins unless both say the job is over. A job requeued after
    NODE_FAIL looks finished in sacct until its new record lands. ``why``: reason for UNKNOWN."""
    if live is not None and (acct is None or not live.finished or not acct.finished):
        return live if acct is None else replace(live, exit_code=acct.exit_code,
                                                 restarts=acct.restarts)
    if acct is not None:
        return acct
    return unknown(job_id, why)


def unknown(job_id: str, why: str) -> JobState:
    """The state of a job neither sacct nor squeue speaks of; ``why`` says why, if known."""
    return _job_state(job_id, "UNKNOWN", "", "", "", 0, why)
