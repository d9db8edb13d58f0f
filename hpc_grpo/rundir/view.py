"""One run directory, read: the launcher's only reader of what it and the ranks wrote there.

``status``, ``resume``, ``export``, ``eval`` and the back ends take a ``RunView`` instead of each
parsing run.json, state.json and jobs.jsonl their own way. People edit, copy, truncate and
half-delete run directories, and a status over a thousand runs must not end in a traceback
because one of them holds something odd: every value is read tolerantly (``RunState.from_dict``'s
rule: a value not of its field's type takes the field's default), and what cannot be read goes
into ``problems`` (status shows them on the run's row; the commands that act on a run refuse
with the first one). Stdlib only, like the rest of the run directory's room.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import last_jsonl, read_jsonl, tail_jsonl
from hpc_grpo.rundir.checkpoints import Checkpoint, run_checkpoints, special_file
from hpc_grpo.rundir.contract import (
    CANCELLED,
    JOBS_JSONL,
    METRICS_JSONL,
    RESTARTS_JSONL,
    RETRIES_JSONL,
    RUN_JSON,
    STARTUP_JSONL,
    STATE_JSON,
    ContractError,
    RunRecord,
)
from hpc_grpo.rundir.state import RunState

RECENT = 32  # metrics lines a view reads from a run's end (a GPU run's line is about 0.7 kB)


def _text(value: Any) -> str:
    return str(value) if isinstance(value, str) or (isinstance(value, int)
                                                     and not isinstance(value, bool)) else ""


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class JobIdentity:
    """One submission of a run, as its jobs.jsonl line records it ("" where not known): what
    tells the run's Slurm job apart from another job with the same id (scheduler/identity.py)."""

    job_id: str
    run_dir: str
    cluster: str = ""
    submit_time: str = ""
    name: str = ""
    script: str = ""

    def fields(self) -> dict[str, str]:
        """The keys jobs.jsonl's "submitted" line carries beside job_id."""
        return {"cluster": self.cluster, "submit_time": self.submit_time,
                "job_name": self.name, "script": self.script}


@dataclass(frozen=True)
class JobLine:
    """One line of jobs.jsonl: a job the run submitted (``submit``, ``resume``, a side job)."""

    job_id: str
    event: str = ""  # "submitted"; older runs' lines have none
    time: float | None = None
    cluster: str = ""
    submit_time: str = ""
    job_name: str = ""
    script: str = ""
    resumed_from_job: str = ""
    resumed_from_step: int | None = None
    layout_change: str = ""  # a resume at another world size: what changed (planner/resume.py)
    # The job a node task submitted this one in place of, without a dead node (#60,
    # runtime/node/replace.py): a requeue of the same run, not a user's resume.
    resubmitted_from_job: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobLine:
        return cls(job_id=_text(data.get("job_id")), event=_text(data.get("event")),
                   time=_time(data.get("time")), cluster=_text(data.get("cluster")),
                   submit_time=_text(data.get("submit_time")),
                   job_name=_text(data.get("job_name")), script=_text(data.get("script")),
                   resumed_from_job=_text(data.get("resumed_from_job")),
                   resumed_from_step=_whole(data.get("resumed_from_step")),
                   layout_change=_text(data.get("layout_change")),
                   resubmitted_from_job=_text(data.get("resubmitted_from_job")))

    def identity(self, run_dir: Path) -> JobIdentity:
        return JobIdentity(self.job_id, str(run_dir), self.cluster, self.submit_time,
                           self.job_name, self.script)


def append_job_line(run_dir: Path, job_id: str, event: str, **extra: Any) -> None:
    """Add a line to jobs.jsonl (one write: a crash leaves at most one partial last line)."""
    line = {"job_id": job_id, "event": event, "time": time.time(), **extra}
    with (run_dir / JOBS_JSONL).open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def read_job_lines(path: Path, problems: list[str]) -> tuple[JobLine, ...]:
    """jobs.jsonl's lines with a job id; a line that is no JSON (but the last, which may be
    being written right now) or has no job id is a problem."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ()
    except OSError as err:
        problems.append(f"{path.name} cannot be read ({type(err).__name__}: {err})")
        return ()
    jobs = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                problems.append(f"{path.name} line {number} is not JSON")
            continue
        if isinstance(entry, dict) and _text(entry.get("job_id")):
            jobs.append(JobLine.from_dict(entry))
        else:
            problems.append(f"{path.name} line {number} has no job_id")
    return tuple(jobs)


@dataclass(frozen=True)
class RestartLine:
    """One line of restarts.jsonl: an attempt that began after an earlier one stopped
    (runtime/rank/restart_record.py writes it), or, with ``pending``, a restart Slurm counts
    that no attempt has recorded yet (status adds it)."""

    cause: str = ""
    time: float | None = None
    attempt: str = ""
    previous_attempt: str = ""
    previous_phase: str = ""
    stopped_at_step: int | None = None
    resumed_from_step: int | None = None
    steps_lost: int | None = None
    pending: bool = False
    slurm_state: str = ""  # status adds it: sacct's end state of the attempt this one followed
    nodes: int | None = None  # the nodes this attempt ran on (fewer than run.json's: min_nodes)

    def to_row(self) -> dict[str, Any]:
        """What ``status --json`` shows of the restart."""
        row: dict[str, Any] = {"cause": self.cause, "stopped_at_step": self.stopped_at_step,
                               "resumed_from_step": self.resumed_from_step,
                               "steps_lost": self.steps_lost, "time": self.time}
        if self.pending:
            row["pending"] = True
        if self.slurm_state:
            row["slurm_state"] = self.slurm_state
        if self.nodes:
            row["nodes"] = self.nodes
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RestartLine:
        return cls(cause=_text(data.get("cause")), time=_time(data.get("time")),
                   attempt=_text(data.get("attempt")),
                   previous_attempt=_text(data.get("previous_attempt")),
                   previous_phase=_text(data.get("previous_phase")),
                   stopped_at_step=_whole(data.get("stopped_at_step")),
                   resumed_from_step=_whole(data.get("resumed_from_step")),
                   steps_lost=_whole(data.get("steps_lost")), nodes=_whole(data.get("nodes")))


@dataclass(frozen=True)
class RetryLine:
    """One line of retries.jsonl: the rank-0 node task decided to requeue a crashed attempt
    (runtime/node/task.py ``_after_exit``) and asks Slurm to, with ``scontrol requeue``."""

    time: float | None = None
    job_id: str = ""  # "" in older lines: the job then running
    checkpoint_step: int | None = None  # the step the next attempt resumes from
    cause: str = ""  # "node failure", "task crash", "out of memory", ...

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryLine:
        return cls(time=_time(data.get("time")), job_id=_text(data.get("job_id")),
                   checkpoint_step=_whole(data.get("checkpoint_step")), cause=_text(data.get("cause")))


@dataclass(frozen=True)
class RecordHead:
    """What status needs of run.json even when the full record cannot be read (a newer schema,
    a missing field): the run's name, site, back end and payload, read tolerantly."""

    run_id: str = ""
    site: str = ""
    scheduler: str = ""
    payload: str = ""
    max_steps: int | None = None  # grpo_config's; TRL's -1 (by epochs) included

    @classmethod
    def read(cls, data: Mapping[str, Any], problems: list[str]) -> RecordHead:
        config = data.get("grpo_config", {})
        if not isinstance(config, dict):
            problems.append(f"{RUN_JSON}: grpo_config is not an object")
            config = {}
        max_steps = config.get("max_steps")
        if max_steps is not None and (isinstance(max_steps, bool)
                                      or not isinstance(max_steps, int | float)):
            problems.append(f"{RUN_JSON}: max_steps is {json.dumps(max_steps)[:40]}, not a number")
        return cls(run_id=_text(data.get("run_id")), site=_text(data.get("site")),
                   scheduler=_text(data.get("scheduler")), payload=_text(data.get("payload")),
                   max_steps=int(max_steps) if isinstance(max_steps, int | float) \
                   and not isinstance(max_steps, bool) else None)


def read_head(run_dir: Path) -> RecordHead:
    """What run.json says of the run's name, site, back end and payload, for a reader that needs
    nothing else (the planner's learnt timings of a site); empty where it cannot be read."""
    return RecordHead.read(read_object(run_dir / RUN_JSON, [], required=False), [])


def read_object(path: Path, problems: list[str], *, required: bool) -> dict[str, Any]:
    """A JSON object file; what stops it being read is one problem (a missing file only where
    ``required``). A FIFO in its place is one too, unopened (the open would wait forever)."""
    if kind := special_file(path):
        problems.append(f"{path.name} is {kind}, not a file")
        return {}
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


@dataclass(frozen=True)
class RunView:
    """What the launcher and the ranks wrote into one run directory, read without a scheduler.

    ``record`` is run.json typed, or None with ``record_problem`` saying why; ``head`` holds
    what status shows of run.json either way. ``raw_state`` is state.json as written, for the
    few checks of a value's own type (status names a field of the wrong type)."""

    run_id: str
    run_dir: Path
    head: RecordHead = RecordHead()
    record: RunRecord | None = None
    record_problem: str = ""
    state: RunState = RunState()
    raw_state: Mapping[str, Any] = field(default_factory=dict)
    jobs: tuple[JobLine, ...] = ()
    restarts: tuple[RestartLine, ...] = ()
    recent_metrics: tuple[Mapping[str, Any], ...] = ()  # the last RECENT lines, oldest first
    startup: Mapping[str, Any] = field(default_factory=dict)  # startup.jsonl's last line
    problems: tuple[str, ...] = ()
    retries: tuple[RetryLine, ...] = ()  # retries.jsonl: the node task's requeues after a crash

    @property
    def job_id(self) -> str:
        return self.jobs[-1].job_id if self.jobs else ""

    @property
    def site(self) -> str:
        return self.head.site

    @property
    def submitted(self) -> JobLine | None:
        """The current job's line: the last "submitted" one (older runs' lines have no event)."""
        lines = [j for j in self.jobs if j.event == "submitted"] or list(self.jobs)
        return lines[-1] if lines else None

    @property
    def identity(self) -> JobIdentity | None:
        """The current job's identity (``submitted``)."""
        line = self.submitted
        return line.identity(self.run_dir) if line else None

    @property
    def cancelled(self) -> bool:
        """``hpc-grpo cancel`` reached the current job: a "cancelled" line of its id follows
        its submission (either back end writes one when the cancel was sent)."""
        line = self.submitted
        if line is None:
            return False
        after = self.jobs[max(i for i, j in enumerate(self.jobs) if j is line) + 1:]
        return any(j.event == CANCELLED and j.job_id == line.job_id for j in after)

    @property
    def due_retry(self) -> RetryLine | None:
        """The requeue the node task asked for after the current attempt failed, while no
        attempt has started since: its line is of the current job and newer than state.json's
        start; None when there is none, or when ``scontrol requeue`` failed (the node task
        then records "requeue failed" and the run has ended)."""
        last = self.retries[-1] if self.retries else None
        if last is None or (last.job_id and last.job_id != self.job_id) \
                or self.state.message.startswith("requeue failed"):
            return None
        started = self.state.started
        return last if started is None or (last.time or 0.0) >= started else None

    @property
    def is_local(self) -> bool:
        """Runs of a local-scheduler site (whatever its name) have a pid, not a Slurm job id."""
        return self.head.scheduler == "local" or self.site == "local"

    @property
    def scheduler(self) -> str:
        """The back end the run's job went to (``scheduler/backend.py backend_for``)."""
        return "local" if self.is_local else "slurm"

    @property
    def checkpoints(self) -> list[Checkpoint]:
        """The run's checkpoint folders, by step, each judged by the ranks' completeness rule."""
        return run_checkpoints(self.run_dir)

    @property
    def resume_checkpoint(self) -> Checkpoint | None:
        """The checkpoint a new job of this run resumes from: the newest complete one."""
        complete = [c for c in self.checkpoints if c.complete]
        return complete[-1] if complete else None


def read_view(run_dir: Path) -> RunView:
    """Everything the launcher reads of one run directory; never raises for its content."""
    problems: list[str] = []
    if not run_dir.is_dir():
        problems.append("the run directory is gone")
    raw = read_object(run_dir / RUN_JSON, problems, required=run_dir.is_dir())
    record: RunRecord | None = None
    record_problem = problems[-1] if problems else ""
    if raw:
        try:
            record = RunRecord.from_dict(raw)
        except ContractError as err:
            record_problem = str(err)
            problems.append(record_problem)
    head = RecordHead.read(raw, problems)
    raw_state = read_object(run_dir / STATE_JSON, problems, required=False)
    jobs = read_job_lines(run_dir / JOBS_JSONL, problems)
    return RunView(
        run_id=head.run_id or run_dir.name, run_dir=run_dir, head=head, record=record,
        record_problem=record_problem, state=RunState.from_dict(raw_state), raw_state=raw_state,
        jobs=jobs,
        restarts=tuple(RestartLine.from_dict(r) for r in read_jsonl(run_dir / RESTARTS_JSONL)),
        recent_metrics=tuple(tail_jsonl(run_dir / METRICS_JSONL, RECENT,
                                        tail_bytes=RECENT * 1024)),
        startup=last_jsonl(run_dir / STARTUP_JSONL), problems=tuple(problems),
        retries=tuple(RetryLine.from_dict(r) for r in read_jsonl(run_dir / RETRIES_JSONL)))
