"""A resumed attempt's record: rank 0 drops the metric lines past the checkpoint it resumes
from and appends the restart, with why the previous attempt ended, to restarts.jsonl (what
``status`` shows as requeues and their causes)."""

from __future__ import annotations

import time
from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.state import RunState


def restart_cause(previous: RunState, run_dir: Path | None = None) -> str:
    """Why the previous attempt ended, as the node task recorded it (in state.json, or in its
    stop-cause file when it was killed before it could) or as its phase implies."""
    if previous.stop_cause:
        return previous.stop_cause
    early = rundir.read_json(run_dir / contract.STOP_CAUSE_JSON) if run_dir else None
    if isinstance(early, dict) and early.get("cause") and early.get("attempt") == previous.attempt:
        return str(early["cause"])
    return {
        "done": "ended",
        "interrupted": "signal (cause not recorded)",  # ranks saved; the node task was killed first
        "failed": "failed",  # resumed by the user after the job ended FAILED (issue #27)
    }.get(previous.phase, "killed (no stop recorded)")


def record_resume(run_dir: Path, previous: RunState, attempt: str, notes: list[str],
                   resume: Path | None, resume_step: int, *, nodes: int | None = None) -> None:
    """Rank 0: drop metric lines past the checkpoint and log the restart with its cause and
    the nodes this attempt runs on (``min_nodes``: fewer than run.json's where Slurm granted
    fewer; status shows them)."""
    dropped = rundir.truncate_metrics(run_dir / contract.METRICS_JSONL, resume_step)
    rundir.update_state(run_dir, notes=notes, resumed_from=str(resume) if resume else None,
                        step=resume_step, metrics_lines_dropped=dropped, stop_cause=None)
    if previous.attempt and previous.attempt != attempt:
        rundir.append_jsonl(run_dir / contract.RESTARTS_JSONL, {
            "time": time.time(), "attempt": attempt, "previous_attempt": previous.attempt,
            "cause": restart_cause(previous, run_dir), "previous_phase": previous.phase or None,
            "stopped_at_step": previous.step, "resumed_from_step": resume_step,
            "steps_lost": steps_lost(previous.step, resume_step),
            **({"nodes": nodes} if nodes else {}),
        })


def steps_lost(stopped_at: int, resume_step: int) -> int:
    """Steps the previous attempt trained past the checkpoint resumed from, as far as its last
    metrics line tells (``stopped_at``: state.json's step, written with each line): not the
    metric lines dropped, which under ``logging_steps: 10`` are a tenth of them."""
    return max(0, stopped_at - resume_step)
