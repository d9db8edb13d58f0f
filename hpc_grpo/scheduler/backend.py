"""One interface for every site's back end: submit, state, cancel, signal, requeue, logs.

In the spirit of submitit's Executor and torchx's Scheduler: the rest of the launcher holds a
``Backend`` and never asks which one it is. ``backend_for`` is the one place a site's
``scheduler`` (or a run directory's record of it) picks the implementation: ``LocalBackend``
(scheduler/local.py: this machine runs the rendered script as it is) or ``SlurmBackend``
(scheduler/slurm_backend.py: sbatch through submitit, jobs told apart by their identity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hpc_grpo.rundir.view import RunView
from hpc_grpo.scheduler.jobstate import JobView

if TYPE_CHECKING:  # the plan's type only: status and cancel never load the planner
    from hpc_grpo.planner.job import JobPlan


@dataclass(frozen=True)
class Submission:
    """A submitted job: its id, and what tells that job apart later (jobs.jsonl's fields)."""

    job_id: str
    known: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    """What an action on a run's job did: ``done`` False when there was nothing to act on."""

    run_id: str
    job_id: str
    done: bool
    message: str


class Backend(Protocol):
    """Where a run's job runs. Every method is given values (a plan, a run directory's files)
    and talks to its scheduler; none of them plans or renders."""

    name: str
    follow_by_default: bool  # `submit` follows progress unless told: a job on this machine

    def check(self, plan: JobPlan) -> None:
        """Refuse, before anything is written, what this scheduler can never run."""

    def submit(self, *, script: str, run_dir: Path, plan: JobPlan, python: str) -> Submission:
        """Start the job that runs ``script`` (already written to ``run_dir/job.sbatch``)."""

    def views(self, runs: Sequence[RunView]) -> list[JobView]:
        """Each run's job state, in order, from as few scheduler queries as it takes."""

    def refuse_if_alive(self, files: RunView, verb: str) -> None:
        """A UserError unless the run's own job is known to be over."""

    def cancel(self, files: RunView) -> Action:
        """Stop the run's job on all nodes, if it is still this run's."""

    def signal(self, files: RunView, signal_name: str) -> Action:
        """Send a signal to the run's node tasks (USR2: checkpoint at the step end, stop)."""

    def requeue(self, files: RunView) -> Action:
        """Put the run's job back in the queue (no checkpoint first)."""

    def node_logs(self, run_dir: Path) -> list[Path]:
        """The node tasks' own output files, oldest first."""

    def submit_side_job(self, job: SideJob) -> Submission:
        """Start a one-node job beside the run's training (`hpc-grpo export` as a job)."""

    def side_job_state(self, job_id: str, script: Path) -> str:
        """A side job's state: a Slurm state name (RUNNING, COMPLETED...), or "ENDED" where the
        back end cannot tell how it ended (the local one: the result is in the run directory)."""


@dataclass(frozen=True)
class SideJob:
    """A one-node job of a run that is not its training: a script in the run directory."""

    script: Path  # run by bash; its output goes to ``log``
    log: Path
    name: str
    mem_mb: int
    time_min: int
    options: tuple[str, ...] = ()  # sbatch's flags of the site: partition, account, QOS


SCHEDULERS = ("slurm", "local")


def backend_for(scheduler: str) -> Backend:
    """The back end of a site's ``scheduler`` (a profile's key, or run.json's record of it)."""
    if scheduler == "local":
        from hpc_grpo.scheduler.local import LocalBackend

        return LocalBackend()
    if scheduler == "slurm":
        from hpc_grpo.scheduler.slurm_backend import SlurmBackend

        return SlurmBackend()
    raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
