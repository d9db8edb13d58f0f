"""Every Slurm command and every submitit call of the launcher, in one place (the runtime's own
scontrol calls, on the compute nodes, are runtime/node/slurm_facts.py's).

One module so that the rest can be tested with fake binaries on PATH, and so that submitit (slow to
import) is only imported inside the functions that submit: the CLI's cold start stays fast. What
the answers mean (states, sacct and squeue columns) is read by the pure ``slurm_records``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from hpc_grpo.errors import UserError
from hpc_grpo.scheduler.slurm_records import (
    JOB_ID,
    SACCT_FIELDS,
    SACCT_FIELDS_BEFORE_22_05,
    SQUEUE_FORMAT,
    JobRecord,
    JobRecords,
    SubmittedJob,
    parse_sacct_records,
    parse_squeue_records,
)

_SACCT = ["sacct", "--parsable2", "--noheader", "--allocations", "--duplicates"]
_SQUEUE = ["squeue", "--noheader", "--states=all", f"--Format={SQUEUE_FORMAT}"]
_NO_SLURM_HINT = "run this on a login node of the cluster (where sbatch works), or use --local"


def _check_id(job_id: str) -> str:
    """Refuse anything Slurm could read as an option, or as another job."""
    if not JOB_ID.fullmatch(job_id):
        raise UserError(f"not a Slurm job id: {job_id!r}", field="job_id")
    return job_id


def _sacct_text(joined: str, timeout: float) -> str:
    try:
        return run_slurm([*_SACCT, f"--format={SACCT_FIELDS}", f"--jobs={joined}"], timeout=timeout)
    except UserError as err:  # sacct before 22.05 has no SubmitLine: identity from squeue only
        if "invalid field" not in err.message.lower():
            raise
        return run_slurm([*_SACCT, f"--format={SACCT_FIELDS_BEFORE_22_05}", f"--jobs={joined}"],
                         timeout=timeout)


def query_records(job_ids: Sequence[str], *, timeout: float = 30) -> JobRecords:
    """All records of any number of jobs from one sacct and one squeue call, run side by side
    and each bounded by ``timeout``; never raises.

    Ids that are not Slurm job ids are left out (a bad record must not break a status)."""
    valid = [j for j in dict.fromkeys(str(j) for j in job_ids) if JOB_ID.fullmatch(j)]
    if not valid:
        return JobRecords({}, {})
    joined = ",".join(valid)
    acct: dict[str, list[JobRecord]] = {}
    queue: dict[str, JobRecord] = {}
    sacct_error = squeue_error = None
    with ThreadPoolExecutor(max_workers=2) as pool:
        sacct = pool.submit(_sacct_text, joined, timeout)
        squeue = pool.submit(run_slurm, [*_SQUEUE, f"--jobs={joined}"], timeout=timeout)
        try:
            acct = parse_sacct_records(sacct.result())
        except UserError as err:  # no slurmdbd, or it is down: squeue still knows live jobs
            sacct_error = err
        try:
            queue = parse_squeue_records(squeue.result())
        except UserError as err:
            if "invalid job id" not in err.message.lower():
                squeue_error = err  # else: squeue rejects a single id it no longer holds
    return JobRecords(acct, queue, sacct_error, squeue_error)


def live_record(job_id: str) -> JobRecord | None:
    """squeue's record of one job (None once slurmctld no longer holds it); UserError if squeue
    cannot be asked. What cancel and requeue check before they act."""
    try:
        out = run_slurm([*_SQUEUE, f"--jobs={_check_id(job_id)}"])
    except UserError as err:
        if "invalid job id" in err.message.lower():
            return None
        raise
    return parse_squeue_records(out).get(job_id)


def submitit_command(python: str, folder: Path) -> str:
    """The line submitit runs on each node task; the sbatch template must contain it verbatim."""
    folder = Path(folder).expanduser().absolute()
    return " ".join([python, "-u -m submitit.core._submit", shlex.quote(str(folder))])


def _checked_script(script_text: str, command: str) -> str:
    """The template and submitit must agree, or the job would start and never run the task."""
    missing = [s for s in (command, "SUBMITIT_EXECUTOR=slurm") if s not in script_text]
    if missing:
        raise RuntimeError(
            f"internal error: the sbatch script lacks {missing}, which submitit "
            "needs in it to run the task on each node"
        )
    return script_text


_JOB_NAME_LINE = re.compile(r"^#SBATCH\s+(?:--job-name[= ]|-J\s*)(\S+)\s*$", re.MULTILINE)


def submit_job(
    *,
    script_text: str,
    folder: Path,
    task: Callable[[], object],
    nodes: int,
    timeout_min: int,
    max_requeues: int,
    python: str,
) -> SubmittedJob:
    """sbatch `script_text` as is, through SlurmExecutor so that each node task unpickles `task`
    and, on USR2, rank 0 calls `task.checkpoint()` and requeues; then read the job back once."""
    # start-up: submitit (and what it imports) loads only to submit, never for status
    from submitit.core.utils import FailedJobError, FailedSubmissionError
    from submitit.slurm.slurm import SlurmExecutor

    for binary in ("sbatch", "srun"):  # SlurmExecutor refuses to exist without srun
        if shutil.which(binary) is None:
            raise UserError(f"Slurm command {binary} not found", hint=_NO_SLURM_HINT)
    given: list[str] = []

    class _ScriptExecutor(SlurmExecutor):
        def _make_submission_file_text(self, command: str, uid: str) -> str:
            return _checked_script(script_text, command)

        def _make_submission_command(self, submission_file_path: Path) -> list[str]:
            given.append(str(submission_file_path))  # a fresh uuid name: the job's identity
            return list(super()._make_submission_command(submission_file_path))

    executor = _ScriptExecutor(folder, max_num_timeout=max_requeues, python=python)
    # time: the countdown submitit stores with the pickle to tell a time-out from a preemption
    executor.update_parameters(nodes=nodes, ntasks_per_node=1, time=timeout_min)
    _checked_script(script_text, submitit_command(python, folder))  # before a pickle is written
    captured = io.StringIO()  # submitit prints sbatch's stderr itself; we report it once
    try:
        with contextlib.redirect_stderr(captured):
            job = executor.submit(task)
    except FailedJobError as err:
        raise UserError(
            f"sbatch rejected the job: {_one_line(str(err))}",
            hint="check partition, account, QOS, time and node count in the site "
            "profile against what the cluster allows (sinfo, sacctmgr)",
        ) from err
    except FailedSubmissionError as err:
        raise UserError(f"sbatch gave no job id: {_one_line(str(err))}") from err
    sys.stderr.write(captured.getvalue())
    job_id = str(job.job_id)
    try:
        record = live_record(job_id)
    except UserError:
        record = None  # the script path alone still tells this job from any other
    name = _JOB_NAME_LINE.search(script_text)
    return SubmittedJob(job_id, given[-1] if given else "", name.group(1) if name else "", record)


def _name_filter(name: str) -> list[str]:
    """scancel's --name: it then acts on the job only while it still has this name, a last
    guard should the id change hands between the caller's check and scancel. Left out for a
    name scancel would read as a list."""
    return [f"--name={name}"] if name and "," not in name else []


def cancel(job_id: str, *, name: str = "") -> None:
    """Cancel a Slurm job (SIGTERM, which submitit ignores, then SIGKILL after KillWait)."""
    run_slurm(["scancel", *_name_filter(name), _check_id(job_id)])


def signal_job(
    job_id: str, signal: str, scope: Literal["steps", "batch", "full"] = "steps", *, name: str = ""
) -> None:
    """Send a signal. "steps" (the default) reaches the srun tasks, where submitit's handler
    lives, and not the batch shell, which a USR2 would kill; "batch"/"full" are scancel's."""
    if not re.fullmatch(r"[A-Za-z0-9]+", signal):
        raise UserError(f"not a signal name: {signal!r}", field="signal")
    flags = {"steps": [], "batch": ["--batch"], "full": ["--full"]}[scope]
    run_slurm(["scancel", f"--signal={signal}", *flags, *_name_filter(name), _check_id(job_id)])


def requeue(job_id: str) -> None:
    """Requeue a job. Slurm sends SIGTERM then SIGKILL: no checkpoint is taken (use USR2 for it)."""
    run_slurm(["scontrol", "requeue", _check_id(job_id)])


def partition_node_count(partition: str) -> int | None:
    """Nodes in a partition (0: no such partition); None where Slurm cannot be asked."""
    try:
        out = run_slurm(
            ["sinfo", "--noheader", "--Node", f"--partition={partition}", "--format=%N"], timeout=15
        )
    except UserError:
        return None
    return len({line.strip() for line in out.splitlines() if line.strip()})


def present() -> bool:
    """Whether Slurm's client commands are on PATH (``site init`` writes a local profile where
    neither scontrol nor sinfo is)."""
    return any(shutil.which(name) for name in ("scontrol", "sinfo"))


def partition_gres(partition: str, *, timeout: float = 10) -> tuple[str, ...] | None:
    """The Gres of each node of ``partition`` (the default partition where ""), as sinfo
    prints it (``gpu:h100:8(S:0-1)``); None where sinfo is absent, fails or is silent, quickly:
    a plan on a laptop asks it too and must neither fail nor wait on it."""
    if shutil.which("sinfo") is None:
        return None
    where = [f"--partition={partition}"] if partition else []
    try:
        out = run_slurm(["sinfo", "--noheader", "--Node", "--format=%N|%P|%G", *where],
                        timeout=timeout)
    except UserError:
        return None
    by_node: dict[str, str] = {}
    for line in out.splitlines():
        node, _, rest = line.strip().partition("|")
        part, _, gres = rest.partition("|")
        if node and (partition or part.endswith("*")):
            by_node[node] = gres.strip()
    return tuple(by_node.values()) or None


def require_partition_nodes(partition: str, nodes: int) -> None:
    """Refuse a request the partition can never hold: sbatch fails late and srun waits forever.

    Does nothing where Slurm cannot be asked (no partition, no sinfo).
    """
    available = partition_node_count(partition) if partition else None
    if available == 0:
        raise UserError(f"partition '{partition}' does not exist or has no nodes",
                        field="partition", hint="`sinfo -s` lists the partitions")
    if available is not None and nodes > available:
        raise UserError(f"{nodes} nodes requested but partition '{partition}' has {available}",
                        field="nodes", hint=f"use --nodes {available} or fewer")


def _one_line(text: str) -> str:
    lines: list[str] = []
    for line in text.splitlines():
        if line.strip() and line.strip() not in lines:
            lines.append(line.strip())
    return "; ".join(lines)[:500]


def submit_script(script: Path, *, name: str, log: Path, mem_mb: int, time_min: int,
                  options: Sequence[str] = ()) -> str:
    """sbatch of a plain script on one node (a run's side job: `export --job`); its job id.
    ``options``: the site's flags (partition, account, QOS)."""
    argv = ["sbatch", "--parsable", "--nodes=1", "--ntasks=1", f"--job-name={name}",
            f"--output={log}", f"--mem={mem_mb}M", f"--time={time_min}", *options]
    out = run_slurm([*argv, str(script)])
    found = re.findall(r"\d+", out.split(";")[0])
    if not found:
        raise UserError(f"sbatch printed no job id: {out.strip()[:80]!r}", field="job")
    return found[-1]


def one_task_step(options: Sequence[str]) -> list[str]:
    """A batch script's srun of one task (e.g. under a pyxis container's ``options``): the words
    before its command."""
    return ["srun", "--ntasks=1", *options]


def run_slurm(argv: list[str], *, timeout: float = 30) -> str:
    """Run one Slurm command, return its stdout; any failure is a one-line UserError.
    SLURM_TIME_FORMAT=standard keeps time stamps ISO whatever the user's environment says."""
    shown = shlex.join(argv)
    shown = shown if len(shown) <= 160 else shown[:157] + "..."
    env = {**os.environ, "SLURM_TIME_FORMAT": "standard"}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except FileNotFoundError as err:
        raise UserError(f"Slurm command {argv[0]} not found", hint=_NO_SLURM_HINT) from err
    except subprocess.TimeoutExpired as err:
        raise UserError(
            f"{argv[0]} gave no answer within {timeout:g} s",
            hint=f"slurmctld or slurmdbd may be down or busy; ran: {shown}",
        ) from err
    if done.returncode != 0:
        message = _one_line(done.stderr or done.stdout) or f"exit code {done.returncode}"
        raise UserError(f"{argv[0]} failed: {message}", hint=f"ran: {shown}")
    return done.stdout


def srun_help() -> str:
    """`srun --help`: a SPANK plugin such as pyxis adds its options (--container-image) here."""
    return run_slurm(["srun", "--help"], timeout=30)


@dataclass(frozen=True)
class StepResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def run_on_nodes(
    command: Sequence[str], *, options: Sequence[str], timeout_s: float,
    env: Mapping[str, str] = MappingProxyType({}),
) -> StepResult:
    """`srun OPTIONS COMMAND` in a fresh allocation (SLURM_* of an enclosing job dropped), waiting
    at most `timeout_s`; then SIGTERM, which makes srun give up a pending allocation or end the step."""
    if shutil.which("srun") is None:
        raise UserError("Slurm command srun not found", hint=_NO_SLURM_HINT)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    proc = subprocess.Popen(["srun", *options, *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**clean, **env})
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return StepResult(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return StepResult(proc.returncode, out, err, True)


def scontrol_show(entity: Literal["node", "partition", "config"]) -> str:
    """`scontrol show node|partition`: every record, as `site init` reads them; `config`: the
    controller's settings (doctor's requeue hold)."""
    return run_slurm(["scontrol", "show", entity], timeout=30)
