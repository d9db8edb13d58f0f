"""Which Slurm job is a run's: a job id alone does not say.

Job ids repeat: a restarted cluster counts from 1 again, ids wrap on busy clusters, and one home
directory (one run index) often serves several clusters. So a run records, when it is submitted,
its job as Slurm sees it: cluster, job id, submit time, job name, and the submission file that
submitit handed to sbatch (``<run>/submitit/.submission_file_<uuid>.sh``: a fresh name for every
submission, which Slurm keeps through requeues as squeue's Command and sacct's SubmitLine).

A record Slurm returns under that id is this run's only if it agrees. The script path decides
where Slurm gives it; without it (sacct before 22.05, ``--wrap`` jobs) the name, submit time and
cluster can only rule a record out: a record with this run's job name is then "likely" this run's
(good enough to show, not to act on), one that names neither script nor job is "unsure" and
counts for nothing either way.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

from hpc_grpo.rundir.view import JobIdentity
from hpc_grpo.scheduler.slurm_records import JobRecord, SubmittedJob

Verdict = Literal["ours", "likely", "unsure", "other", "elsewhere"]
# slurmdbd names a job "allocation" when the message that created its record carried no name:
# sacct shows such records for pending and just-started jobs, whoever's they are.
_PLACEHOLDER_NAMES = frozenset({"allocation"})


def of_submission(job: SubmittedJob, run_dir: str) -> JobIdentity:
    """What tells a just-submitted job apart, as jobs.jsonl records it."""
    record = job.record
    return JobIdentity(
        job_id=job.job_id, run_dir=run_dir,
        cluster=record.cluster if record else "",
        submit_time=record.submit if record else "",
        name=(record.name if record else "") or job.name,
        script=job.script or (record.command if record else ""),
    )


@dataclass(frozen=True)
class Match:
    verdict: Verdict
    why: str = ""


def _time(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None


def _runs(command: str, path: str, *, prefix: bool = False) -> bool:
    """Whether `command` (a script path, or "sbatch ... PATH") names `path` as a whole word."""
    padded = f" {command}"
    if prefix:
        return f" {path}" in padded
    return padded.endswith(f" {path}") or f" {path} " in padded


def describe(record: JobRecord) -> str:
    name = f"'{record.name}'" if record.name else "unnamed"
    when = f", submitted {record.submit}" if record.submit else ""
    return f"job {record.job_id} is now another job ({name}{when})"


def match(identity: JobIdentity, record: JobRecord) -> Match:
    """Whether `record` (what Slurm holds under this run's job id) is this run's job."""
    if identity.cluster and record.cluster and identity.cluster != record.cluster:
        return Match("elsewhere", f"job {identity.job_id} of this run is on cluster "
                                  f"{identity.cluster}; this is cluster {record.cluster}")
    if record.command:
        if identity.script:
            ours = _runs(record.command, identity.script)
        else:  # recorded before identities were: its scripts lie in the run's submitit folder
            ours = _runs(record.command, f"{identity.run_dir}/submitit/.submission_file_",
                         prefix=True)
        return Match("ours") if ours else Match("other", describe(record))
    named = record.name not in ("", *_PLACEHOLDER_NAMES)
    if identity.name and named and identity.name != record.name:
        return Match("other", describe(record))
    ours_at, theirs_at = _time(identity.submit_time), _time(record.submit)
    if ours_at and theirs_at and theirs_at < ours_at:  # a requeue only moves Submit later
        return Match("other", describe(record))
    if identity.name and named:
        return Match("likely", f"Slurm does not say which script job {identity.job_id} runs")
    return Match("unsure", f"Slurm's record of job {identity.job_id} names neither its "
                           "script nor its job")
