"""Tracking: what every run is doing, from its run directory and one batched Slurm query; and
the actions on a run's job (cancel, requeue, signal), taken only once Slurm's job is this run's.

Kept apart from ``api`` (which plans and renders) so ``status`` never loads Jinja, YAML or the
planner: it must stay fast over a thousand runs on a busy login node. A job is never taken by
its number alone (``identity``), and one run directory never breaks the status of the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.errors import UserError
from hpc_grpo.rundir import ledgers, steps
from hpc_grpo.rundir.contract import (
    JOBS_JSONL,
    LOGS,
    METRICS_JSONL,
    RANK_LOG,
    SUMMARY_JSON,
    RunRecord,
)
from hpc_grpo.rundir.view import RestartLine
from hpc_grpo.runs import after_training as after
from hpc_grpo.runs import joberror, registry, saves
from hpc_grpo.runs.attempts import (
    is_resume,
    nodes_line,
    resumed_line,
    startup_line,
    with_accounting,
)
from hpc_grpo.runs.runfiles import RunFiles, read_run
from hpc_grpo.scheduler.backend import Action, Backend, backend_for
from hpc_grpo.scheduler.jobstate import JobView, requeuing
from hpc_grpo.scheduler.slurm_records import JobState


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
    exported: str = ""  # the newest `hpc-grpo export` of the run (runs/after_training.py), one line
    evaluated: str = ""  # the newest `hpc-grpo eval` of the run, one line
    pushed: str = ""  # the newest push to the hub, or "push pending: COMMAND" (runs/after_training.py)
    export_job: str = ""  # the newest `export` run as a job and its state (export/side_job.py)
    startup: str = ""  # the last attempt's time to its first step, by part (attempts.py)
    resumes: tuple[dict[str, Any], ...] = ()  # hpc-grpo resume's restarts: not requeues
    resumed: str = ""  # "resumed by the user from step N" (attempts.resumed_line), "" never
    layout_change: str = ""  # the newest resume at another world size (jobs.jsonl), one line
    attempt_nodes: str = ""  # min_nodes: each restarted attempt's node count (attempts.nodes_line)
    requeuing: str = ""  # "REQUEUING: node failure at step 3, ..." while Slurm will restart it
    step_s: float | None = None  # measured steady s/step (rundir/steps.py steady_steps)
    step_s_predicted: float | None = None  # what the run's plan predicted (run.json)
    step_time: str = ""  # the two as one line; only for the runs status names
    save_s: tuple[float, ...] = ()  # each completed save's seconds, oldest first (saves.py)
    save_held_s: tuple[float, ...] = ()  # the training time saves held, where they record it
    save_s_median: float | None = None
    save_s_predicted: float | None = None  # one save as the run's plan predicted it (run.json)
    save_write_gbs: float | None = None  # the write bandwidth a node the prediction assumed
    save_write_source: str = ""  # "measured", "declared", "assumed"
    saves: str = ""  # the saves against the prediction as one line; only for the runs status names

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(files: RunFiles, view: JobView) -> RunStatus:
    row = _plain_row(files, view)
    return joberror.apply(row, files.run_dir, files.job_id)  # a module that did not load


def _plain_row(files: RunFiles, view: JobView) -> RunStatus:
    js, progress = view.state, files.progress
    identity, state = files.identity, files.state
    resubmitted = {j.job_id: j.resubmitted_from_job for j in files.jobs if j.resubmitted_from_job}
    resumes = [r for r in files.restarts if is_resume(r, resubmitted)]
    requeued = [r for r in files.restarts if not is_resume(r, resubmitted)]
    coming = requeuing(view, files)  # not finished, whatever the last attempt recorded (#58)
    pending = _pending_restart(files, js, bool(coming))
    steady, predicted = _step_times(files)
    saved = saves.save_times(files.run_dir, files.record, files.state)  # against the plan's
    return RunStatus(
        run_id=files.run_id, run_dir=str(files.run_dir), site=files.site, job_id=files.job_id,
        state=js.state, finished=js.finished and not coming, meaning=js.meaning,
        phase=progress.phase, step=progress.step, max_steps=progress.max_steps,
        reward=progress.reward, tokens_per_s=progress.tokens_per_s,
        checkpoint_step=progress.checkpoint_step, checkpoint_time=progress.checkpoint_time,
        requeues=max(js.restarts, len(requeued) + len(pending)), nodes=js.nodes, requeuing=coming,
        restarts=tuple(r.to_row() for r in (
            *with_accounting(requeued, files.job_id, view.attempts), *pending)),
        resumes=tuple(r.to_row() for r in resumes), resumed=resumed_line(resumes),
        cluster=identity.cluster if identity else "", source=view.source,
        note="; ".join([*files.problems, *([view.note] if view.note else [])]),
        cause=progress.cause, message=progress.message,
        logp_diff=progress.logp_diff, drift=progress.drift,
        stalled=progress.stalled, stalled_ranks=progress.stalled_ranks,
        tracker_sync=state.tracker_sync, checkpoint_skipped=progress.skipped,
        startup=startup_line(files.startup, state.attempt),
        layout_change=next((j.layout_change for j in reversed(files.jobs) if j.layout_change), ""),
        attempt_nodes=nodes_line(files.restarts, files.startup, files.record.nodes,
                                 files.record.min_nodes) if files.record else "",
        step_s=steady.seconds if steady else None, step_s_predicted=predicted,
        step_time=steps.measured_line(steady, predicted) if steady else "",
        save_s=saved.measured, save_held_s=saved.held, save_s_median=saved.median,
        save_s_predicted=saved.predicted, save_write_gbs=saved.gbs,
        save_write_source=saved.source, saves=saved.line(),
        **_after_training(files.run_dir, files.record, progress.phase),
    )


def _step_times(files: RunFiles) -> tuple[steps.SteadySteps | None, float | None]:
    """Measured steady s/step (the last metrics lines) and the plan's prediction (run.json)."""
    steady = steps.steady_steps(files.recent_metrics,
                                (r.resumed_from_step for r in files.restarts))
    return steady, files.record.predicted_step_s if files.record else None


def _after_training(run_dir: Path, record: RunRecord | None, phase: str) -> dict[str, str]:
    """The newest export, evaluation and push (or the push pending), one line each ("" none)."""
    export, evaluation = ledgers.newest_export(run_dir), ledgers.newest_eval(run_dir)
    pushed = ledgers.newest_push(run_dir)
    return {"exported": after.export_line(export) if export else "",
            "evaluated": after.eval_line(evaluation) if evaluation else "",
            "pushed": after.push_pending(run_dir, record, phase)
            or (after.push_line(pushed) if pushed else ""), "export_job": after.export_job_line(run_dir)}


def _pending_restart(files: RunFiles, js: JobState, coming: bool) -> tuple[RestartLine, ...]:
    """The restart Slurm counts but no attempt has recorded yet (the requeued job still waits):
    its cause is what the stopped attempt's node task recorded in state.json (#27: a pending
    requeue showed 2 restarts and one cause). Slurm counts the current job's restarts only, so
    only its attempts' lines answer them: after ``hpc-grpo resume``, restarts.jsonl also holds
    the earlier jobs' lines and the resumed job's first one. ``coming``: the run is requeuing
    (jobstate.requeuing) before Slurm's count shows it (#58: rq 0 read as final)."""
    if not coming and (js.finished or js.restarts <= _requeued_attempts(files.restarts, files.job_id)):
        return ()
    return (RestartLine(cause=files.progress.cause or "not recorded yet",
                        stopped_at_step=files.progress.step, pending=True),)


def _requeued_attempts(restarts: Sequence[RestartLine], job_id: str) -> int:
    """The restart lines of Slurm's requeues of ``job_id``: attempts ``slurm-JOB.N`` with N
    from 1 (runtime/node/task.py ``attempt_id``; N is SLURM_RESTART_COUNT)."""
    prefix = f"slurm-{job_id}."

    def requeue_of_job(line: RestartLine) -> bool:
        if not line.attempt:  # older lines: the attempt it followed was this job's
            return line.previous_attempt.startswith(prefix)
        return line.attempt.startswith(prefix) and line.attempt[len(prefix):] not in ("", "0")

    return sum(1 for line in restarts if requeue_of_job(line))


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


def backend_of(files: RunFiles) -> Backend:
    """The back end a run directory's job went to (run.json's scheduler)."""
    return backend_for(files.scheduler)


def status(names: Sequence[str] = ()) -> list[RunStatus]:
    """Every run (or the named ones) joined with its back end's state, from ONE batched query
    per back end.

    Slurm failing or absent is not an error: the rows then say what the run directories know."""
    dirs = [registry.find_run(n) for n in names] if names else \
        [run.run_dir for run in registry.indexed_runs()]
    read = {d: _read(d) for d in dict.fromkeys(dirs)}
    runs = [f for f in read.values() if isinstance(f, RunFiles)]
    by_backend: dict[str, list[RunFiles]] = {}
    for run in runs:
        by_backend.setdefault(run.scheduler, []).append(run)
    views: dict[Path, JobView | Exception] = {}
    for name, group in by_backend.items():
        try:
            views.update(zip((f.run_dir for f in group), backend_for(name).views(group), strict=True))
        except Exception as err:  # noqa: BLE001 - one back end's failure stays on its rows
            views.update(dict.fromkeys((f.run_dir for f in group), err))
    out = []
    for run_dir, files in read.items():
        if not isinstance(files, RunFiles):
            out.append(_broken(run_dir, files))
            continue
        view = views[files.run_dir]
        try:
            if isinstance(view, Exception):
                raise view
            row = _row(files, view)
            out.append(row if names else dataclasses.replace(row, step_time="", saves=""))  # one line a run
        except Exception as err:  # noqa: BLE001 - a case nobody foresaw stays on its own row
            out.append(_broken(run_dir, err))
    return out


def _with_job(name: str) -> RunFiles:
    files = read_run(registry.find_run(name))
    if files.identity is None or not files.identity.job_id:
        raise UserError(f"run {files.run_id} has no job", field="run",
                        hint=f"{files.run_dir / JOBS_JSONL} names none")
    return files


def refuse_if_alive(files: RunFiles, verb: str = "resumed") -> None:
    """A UserError unless the run's own job is known to be over (the back end decides how)."""
    backend_of(files).refuse_if_alive(files, verb)


def cancel(name: str) -> Action:
    """Cancel the run's job on all nodes, if it is still this run's and not over."""
    files = _with_job(name)
    return backend_of(files).cancel(files)


def requeue(name: str) -> Action:
    """Requeue the run's job (no checkpoint first: ``signal(name, "USR2")`` takes one)."""
    files = _with_job(name)
    return backend_of(files).requeue(files)


def signal(name: str, signal_name: str) -> Action:
    """Send a signal to the run's node tasks (USR2: checkpoint at the next step, then stop)."""
    files = _with_job(name)
    return backend_of(files).signal(files, signal_name)


@dataclass(frozen=True)
class FollowedRun:
    """What following a run shows: its status row, the last step's time, and the final summary
    (empty until the ranks write it)."""

    row: RunStatus
    step_time: float | None
    summary: dict[str, Any]


def progress(run_dir: Path) -> FollowedRun:
    row = status([str(run_dir)])[0]
    step_time = rundir.last_jsonl(run_dir / METRICS_JSONL).get("step_time")
    return FollowedRun(row, step_time if isinstance(step_time, int | float) else None,
                    rundir.read_json_object(run_dir / SUMMARY_JSON) if row.finished else {})


def log_paths(name: str, rank: int | None) -> list[Path]:
    """Per-rank logs (``--rank N``) or every rank's, plus the node tasks' own logs."""
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
    files = _read(run_dir)
    return ranks + backend_for(files.scheduler if isinstance(files, RunFiles) else "slurm"
                               ).node_logs(run_dir)
