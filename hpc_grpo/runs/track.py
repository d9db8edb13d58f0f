"""Tracking: what every run is doing, from its run directory and one batched Slurm query; and
the actions on a run's job (cancel, requeue, signal), taken only once Slurm's job is this run's.

Kept apart from ``api`` (which plans and renders) so ``status`` never loads Jinja, YAML or the
planner: it must stay fast over a thousand runs on a busy login node. A job is never taken by
its number alone (``identity``), and one run directory never breaks the status of the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.runs import joberror, registry
from hpc_grpo.runs.attempts import with_accounting
from hpc_grpo.runs.identity import match
from hpc_grpo.runs.jobstate import JobView, local_view, slurm_view
from hpc_grpo.runs.runfiles import RunFiles, read_run
from hpc_grpo.runtime.contract import (
    JOBS_JSONL,
    LOGS,
    METRICS_JSONL,
    RANK_LOG,
    SUBMITIT,
    SUMMARY_JSON,
)
from hpc_grpo.scheduler import local, slurm


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    run_dir: str
    site: str
    job_id: str
    state: str
    finished: bool
    meaning: str
    phase: str
    step: int
    max_steps: int
    reward: float | None
    tokens_per_s: float | None
    checkpoint_step: int | None
    checkpoint_time: float | None
    requeues: int
    nodes: str
    restarts: tuple[dict[str, Any], ...] = ()
    cluster: str = ""
    source: str = "slurm"  # "slurm", "local", or "run directory" where Slurm cannot speak for it
    note: str = ""  # why the state came from the run directory, or what is wrong in it
    cause: str = ""  # why the last attempt stopped or failed ("configuration error", "preempted")
    message: str = ""  # what failed, as the ranks or the node task recorded it
    logp_diff: float | None = None  # last step's vLLM/trainer log-prob difference (runs/drift.py)
    drift: str = ""  # why the engine may generate with stale weights, "" when no recent step says so
    stalled: str = ""  # the hang watchdog's finding while it is why the run stopped last
    stalled_ranks: tuple[int, ...] = ()  # the ranks it found behind (() all stopped level)
    tracker_sync: str = ""  # the command that uploads the run's offline W&B run (tracking.py)
    checkpoint_skipped: str = ""  # the last save skipped for lack of space (rank callbacks)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(files: RunFiles, view: JobView) -> RunStatus:
    row = _plain_row(files, view)
    return joberror.apply(row, files.run_dir, files.job_id)  # a module that did not load


def _plain_row(files: RunFiles, view: JobView) -> RunStatus:
    js, progress = view.state, files.progress
    identity = files.identity
    return RunStatus(
        run_id=files.run_id, run_dir=str(files.run_dir), site=files.site, job_id=files.job_id,
        state=js.state, finished=js.finished, meaning=js.meaning, phase=progress.phase,
        step=progress.step, max_steps=progress.max_steps, reward=progress.reward,
        tokens_per_s=progress.tokens_per_s, checkpoint_step=progress.checkpoint_step,
        checkpoint_time=progress.checkpoint_time,
        requeues=max(js.restarts, len(files.restarts)), nodes=js.nodes,
        restarts=tuple({**{k: r.get(k) for k in ("cause", "stopped_at_step", "resumed_from_step",
                                                 "steps_lost", "time")},
                        **({"slurm_state": r["slurm_state"]} if "slurm_state" in r else {})}
                       for r in with_accounting(files.restarts, files.job_id, view.attempts)),
        cluster=identity.cluster if identity else "", source=view.source,
        note="; ".join([*files.problems, *([view.note] if view.note else [])]),
        cause=progress.cause, message=progress.message,
        logp_diff=progress.logp_diff, drift=progress.drift,
        stalled=progress.stalled, stalled_ranks=progress.stalled_ranks,
        tracker_sync=str(files.state.get("tracker_sync") or ""),
        checkpoint_skipped=progress.skipped,
    )


def _broken(run_dir: Path, error: Exception) -> RunStatus:
    """The row of a run directory that could not be read at all: what went wrong, nothing more."""
    return RunStatus(
        run_id=run_dir.name, run_dir=str(run_dir), site="", job_id="", state="BROKEN",
        finished=False, meaning="the run directory could not be read", phase="", step=0,
        max_steps=0, reward=None, tokens_per_s=None, checkpoint_step=None, checkpoint_time=None,
        requeues=0, nodes="", source="run directory",
        note=f"cannot read the run directory: {type(error).__name__}: {error}",
    )


def _read(run_dir: Path) -> RunFiles | Exception:
    try:
        return read_run(run_dir)
    except Exception as err:  # noqa: BLE001 - one run directory must not break every status
        return err


def status(names: Sequence[str] = ()) -> list[RunStatus]:
    """Every run (or the named ones) joined with Slurm state from ONE batched query.

    Slurm failing or absent is not an error: the rows then say what the run directories know."""
    dirs = [registry.find_run(n) for n in names] if names else \
        [run.run_dir for run in registry.indexed_runs()]
    read = {d: _read(d) for d in dict.fromkeys(dirs)}
    runs = [f for f in read.values() if isinstance(f, RunFiles)]
    slurm_ids = [i.job_id for f in runs if not f.is_local and (i := f.identity) and i.job_id]
    records = slurm.query_records(slurm_ids)  # no ids: no call, empty records
    out = []
    for run_dir, files in read.items():
        if not isinstance(files, RunFiles):
            out.append(_broken(run_dir, files))
            continue
        try:
            view = local_view(files) if files.is_local else slurm_view(files, records)
            out.append(_row(files, view))
        except Exception as err:  # noqa: BLE001 - a case nobody foresaw stays on its own row
            out.append(_broken(run_dir, err))
    return out


@dataclass(frozen=True)
class Action:
    """What an action on a run's job did: ``done`` False when there was nothing to act on."""

    run_id: str
    job_id: str
    done: bool
    message: str


def _act(name: str, verb: str, act: Callable[[str, str], None],
         act_local: Callable[[RunFiles], None] | None = None) -> Action:
    """Act on the run's job only after squeue shows that the job under its id is this run's.

    A job that is over, forgotten or now someone else's is left alone (``done`` False); where
    it cannot be told (squeue failing, Slurm not saying which script the job runs, another
    cluster) nothing is done and the reason is a UserError."""
    files = read_run(registry.find_run(name))
    identity = files.identity
    if identity is None or not identity.job_id:
        raise UserError(f"run {files.run_id} has no job", field="run",
                        hint=f"{files.run_dir / JOBS_JSONL} names none")
    run, job_id = files.run_id, identity.job_id
    if files.is_local:
        if act_local is None:
            raise UserError(f"a local run cannot be {verb}", field="run")
        if not local.local_job_alive(job_id, files.run_dir / SUBMITIT):
            return Action(run, job_id, False, f"run {run} is not running: nothing {verb}")
        act_local(files)
        return Action(run, job_id, True, f"{verb} local run {run} (pid {job_id})")
    try:
        record = slurm.live_record(job_id)
    except UserError as err:
        raise UserError(f"cannot check that job {job_id} is run {run}'s: {err.message}",
                        field="run", hint=f"nothing was {verb}; try again once squeue answers"
                        ) from err
    if record is None:
        return Action(run, job_id, False, f"nothing {verb}: Slurm no longer has job {job_id} "
                      f"of run {run} (phase {files.progress.phase or 'not started'})")
    verdict = match(identity, record)
    if verdict.verdict == "other":
        return Action(run, job_id, False, f"nothing {verb}: {verdict.why}; run {run}'s own job "
                      f"is over (phase {files.progress.phase or 'not started'})")
    if verdict.verdict != "ours":
        raise UserError(f"cannot tell that job {job_id} is run {run}'s: {verdict.why}",
                        field="run", hint=f"nothing was {verb}; check `scontrol show job "
                        f"{job_id}` and use Slurm's own commands if it is")
    if record.state.finished:
        return Action(run, job_id, False,
                      f"nothing {verb}: job {job_id} of run {run} already ended ({record.state.state})")
    act(job_id, record.name)
    registry.record_job(files.run_dir, job_id, verb)
    return Action(run, job_id, True, f"{verb} job {job_id} (run {run})")


def refuse_if_alive(files: RunFiles, verb: str = "resumed") -> None:
    """A UserError unless the run's own job is known to be over (gone from squeue, ended, or its
    id now another job's): a second job in the same run directory would train over the first.
    Where squeue cannot say (it fails, Slurm names no script, another cluster), refuse too."""
    identity = files.identity
    run = files.run_id
    if identity is None or not identity.job_id:
        return  # never submitted: nothing can be running
    job_id = identity.job_id
    if files.is_local:
        if local.local_job_alive(job_id, files.run_dir / SUBMITIT):
            raise UserError(f"run {run} is still running (pid {job_id})", field="run",
                            hint=f"wait for it or `hpc-grpo cancel {run}` first")
        return
    try:
        record = slurm.live_record(job_id)
    except UserError as err:
        raise UserError(f"cannot check that job {job_id} of run {run} is over: {err.message}",
                        field="run", hint=f"nothing was {verb}; try again once squeue answers"
                        ) from err
    if record is None:
        return
    verdict = match(identity, record)
    if verdict.verdict == "other":
        return
    if verdict.verdict == "elsewhere":
        raise UserError(f"run {run} belongs to another cluster: {verdict.why}", field="run",
                        hint=f"{verb} it from a login node of cluster {identity.cluster}")
    if verdict.verdict != "ours":
        raise UserError(f"cannot tell whether job {job_id} is run {run}'s: {verdict.why}",
                        field="run", hint=f"nothing was {verb}; check `scontrol show job {job_id}`")
    if not record.state.finished:
        raise UserError(f"run {run} is still {record.state.state} as job {job_id}", field="run",
                        hint=f"wait for it to end or `hpc-grpo cancel {run}` first")


def cancel(name: str) -> Action:
    """Cancel the run's job on all nodes, if it is still this run's and not over."""
    return _act(name, "cancelled", lambda job, job_name: slurm.cancel(job, name=job_name),
                lambda files: local.cancel_local(files.job_id, files.run_dir / SUBMITIT))


def requeue(name: str) -> Action:
    """Requeue the run's job (no checkpoint first: ``signal(name, "USR2")`` takes one)."""
    return _act(name, "requeued", lambda job, _: slurm.requeue(job))


def signal(name: str, signal_name: str) -> Action:
    """Send a signal to the run's node tasks (USR2: checkpoint at the next step, then requeue)."""
    return _act(name, "signalled",
                lambda job, job_name: slurm.signal_job(job, signal_name, name=job_name))


@dataclass(frozen=True)
class Progress:
    """What following a run shows: its status row, the last step's time, and the final summary
    (empty until the ranks write it)."""

    row: RunStatus
    step_time: float | None
    summary: dict[str, Any]


def progress(run_dir: Path) -> Progress:
    row = status([str(run_dir)])[0]
    step_time = registry.last_jsonl(run_dir / METRICS_JSONL).get("step_time")
    return Progress(row, step_time if isinstance(step_time, int | float) else None,
                    registry.read_json(run_dir / SUMMARY_JSON) if row.finished else {})


def log_paths(name: str, rank: int | None) -> list[Path]:
    """Per-rank logs (``--rank N``) or every rank's, plus the node tasks' Slurm logs."""
    run_dir = registry.find_run(name)
    if rank is not None:
        path = run_dir / LOGS / RANK_LOG.format(rank=rank)
        if not path.exists():
            present = sorted(p.stem for p in (run_dir / LOGS).glob(RANK_LOG.format(rank="*")))
            raise UserError(f"no log for rank {rank} yet", field="rank",
                            hint=f"present: {', '.join(present) or 'none'}")
        return [path]
    ranks = sorted((run_dir / LOGS).glob(RANK_LOG.format(rank="*")),
                   key=lambda p: int(p.stem.split("-")[1]))
    nodes = sorted((run_dir / SUBMITIT).glob("*_log.*"))
    return ranks + nodes
