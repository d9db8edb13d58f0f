"""A job that lost a node for good submits its successor without that node (#60).

When a node dies (its slurmd and processes gone), Slurm keeps the job COMPLETING on it until
``SlurmdTimeout`` marks the node DOWN (300 s by default): a requeued job, and a job that depends
on it with ``afterany``, wait that long while other nodes sit idle (issue #60: on the sandbox
cluster a requeued run trained again 424 s after the fault). The rank-0 node task, which has just
found the node's slurmd silent (slurm_facts.silent_nodes), does not requeue its job then; it

1. submits the job's own script again (``sbatch --exclude=DEAD --dependency=afterany:OLD``):
   the dependency is the fallback that keeps two copies from ever running together (if this
   task dies before step 4, the new job waits as a requeue would have);
2. gives the new job submitit's pickle (``<job>_submitted.pkl``, what the script's
   ``submitit.core._submit`` loads) and a "submitted" line in jobs.jsonl with
   ``resubmitted_from_job``, so ``status`` and ``cancel`` follow the new job;
3. cancels the old job: Slurm then records its End (sacct), though it stays COMPLETING on the
   dead node, and a cancelled job is never requeued, so the old job cannot start a second copy;
4. drops the new job's dependency, so it starts on free nodes at once.

Whatever fails before step 3 leaves the old job to the usual requeue (the caller's fallback).
Every step is a plain user's. The survivor cannot set the dead node DOWN itself instead:
``scontrol update NodeName=... State=DOWN`` is an operator's (slurmctld answers a user "Invalid
user id").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.rundir import contract
from hpc_grpo.rundir.view import JobLine, append_job_line, read_job_lines
from hpc_grpo.runtime.node import slurm_facts

# What sbatch must not inherit from this job's environment: Slurm's and submitit's variables of
# the old job and step (an inherited SLURM_MEM_PER_CPU beside the new job's SLURM_MEM_PER_NODE
# makes srun refuse to start; SBATCH_* would override the script's own #SBATCH lines).
_JOB_PREFIXES = ("SLURM", "SBATCH_", "SALLOC_", "SRUN_", "SUBMITIT_")
_KEPT = frozenset({"SLURM_CONF"})  # where the site's Slurm configuration is


@dataclass(frozen=True)
class Replacement:
    """The job that carries on the run ("" when none) and what went wrong (""); ``cancelled``:
    the user cancelled the run meanwhile, so nothing carries it on and nothing is requeued."""

    job_id: str = ""
    problem: str = ""
    cancelled: bool = False

    @property
    def requeue(self) -> bool:
        """Whether the old job is left to the usual requeue (nothing was changed)."""
        return not self.job_id and not self.cancelled


def submit_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment sbatch gets: this one without the old job's Slurm and submitit variables,
    which is the environment the run was submitted with plus what its script exports anyway."""
    return {k: v for k, v in env.items() if k in _KEPT or not k.startswith(_JOB_PREFIXES)}


def excluded(earlier: str, dead: Sequence[str]) -> list[str]:
    """The nodes the new job must avoid: the old job's ExcNodeList (``(null)`` for none; an
    earlier resubmission's dead nodes) and the nodes that died now."""
    known = [] if earlier in ("", "(null)") else earlier.split(",")
    return sorted({*known, *dead})


def sbatch_argv(script: str, exclude: Sequence[str], after_job: str) -> list[str]:
    """The resubmission: the same script (its #SBATCH lines ask for the same nodes, time and
    partition; Slurm records the same Command, which tells the job as this run's), without the
    dead nodes, held behind the old job until step 4 of the module's sequence."""
    return [f"--exclude={','.join(exclude)}", f"--dependency=afterany:{after_job}", script]


def job_chain(jobs: Sequence[JobLine], job: str) -> frozenset[str]:
    """``job`` and every job it was resubmitted from by a node task, back to the one the user
    submitted: they share the run's automatic retries, as one job's requeues do."""
    back = {line.job_id: line.resubmitted_from_job for line in jobs if line.resubmitted_from_job}
    chain = [job]
    while back.get(chain[-1]) and back[chain[-1]] not in chain:
        chain.append(back[chain[-1]])
    return frozenset(chain)


def current_script(jobs: Sequence[JobLine]) -> str:
    """The submission file of the run's current job (jobs.jsonl's last "submitted" line)."""
    submitted = [line for line in jobs if line.event == "submitted" and line.script]
    return submitted[-1].script if submitted else ""


def cancelled_by_user(jobs: Sequence[JobLine], job: str) -> bool:
    """``hpc-grpo cancel`` reached ``job`` (its "cancelled" line): the run is to stop, and the
    job submitted in its place goes too. (A cancel whose line comes after this look is the one
    window left: its scancel then finds the new job's line, not the old job, next time.)"""
    return any(line.job_id == job and line.event == contract.CANCELLED for line in jobs)


def replace(run_dir: Path, job: str, dead: Sequence[str], env: Mapping[str, str]) -> Replacement:
    """Submit the run's next job without the ``dead`` nodes and end ``job`` (the module's four
    steps). A Replacement without a job id: nothing was changed, requeue as before."""
    jobs = read_job_lines(run_dir / contract.JOBS_JSONL, [])
    script = current_script(jobs)
    if not script or not Path(script).exists():
        return Replacement(problem=f"no job script to resubmit ({script or 'jobs.jsonl names none'})")
    folder = Path(env.get("SUBMITIT_FOLDER") or Path(script).parent)
    pickle = folder / f"{job}_submitted.pkl"
    if not pickle.is_file():
        return Replacement(problem=f"{pickle} is missing")
    exclude = excluded(slurm_facts.job_record(job).get("ExcNodeList", ""), dead)
    new, problem = slurm_facts.submit(sbatch_argv(script, exclude, job), submit_env(env))
    if problem:
        return Replacement(problem=problem)
    try:  # whole or not at all: submitit loads the pickle as soon as the file exists
        partial = folder / f".{new}_submitted.pkl.partial"
        shutil.copyfile(pickle, partial)
        os.replace(partial, folder / f"{new}_submitted.pkl")
    except OSError as err:
        slurm_facts.cancel(new)
        return Replacement(problem=f"the new job's pickle could not be written: {err}")
    record = slurm_facts.job_record(new)
    append_job_line(run_dir, new, "submitted", cluster=slurm_facts.cluster_name(),
                    submit_time=record.get("SubmitTime", ""), job_name=record.get("JobName", ""),
                    script=script, resubmitted_from_job=job, excluded_nodes=exclude)
    if problem := slurm_facts.cancel(job):  # the new job then starts when the old one ends
        return Replacement(new, f"job {job} not cancelled ({problem}): job {new} waits for it")
    if cancelled_by_user(read_job_lines(run_dir / contract.JOBS_JSONL, []), job):
        slurm_facts.cancel(new)  # `hpc-grpo cancel` reached the old job before it knew the new
        return Replacement(problem=f"job {job} was cancelled by the user: job {new} cancelled "
                           "too", cancelled=True)
    if problem := slurm_facts.drop_dependency(new):
        return Replacement(new, f"job {new} waits for job {job} to end ({problem})")
    return Replacement(new)
