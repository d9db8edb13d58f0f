"""Tracking: what every run is doing, from its run directory and one batched Slurm query.

Kept apart from ``api`` (which plans and renders) so ``status`` never loads Jinja, YAML or the
planner: it must stay fast over a thousand runs on a busy login node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.runs import registry
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _is_local(files: registry.RunFiles) -> bool:
    """Runs of a local-scheduler site (whatever its name) have a pid, not a Slurm job id."""
    return files.record.get("scheduler") == "local" or files.site == "local"


def _local_state(files: registry.RunFiles) -> slurm.JobState:
    phase = files.state.get("phase", "")
    if files.job_id and local.local_job_alive(files.job_id):
        state = "RUNNING"
    elif phase == "done" or (files.record.get("payload") == "check" and phase != "failed"
                             and (files.run_dir / "check").exists()):
        state = "COMPLETED"
    else:
        state = "FAILED"
    finished, meaning = slurm.STATE_MEANINGS[state]
    return slurm.JobState(files.job_id, state, finished, meaning, "localhost", "", "", 0, "")


def status(names: Sequence[str] = ()) -> list[RunStatus]:
    """Every run (or the named ones) joined with Slurm state from ONE batched query."""
    dirs = [registry.find_run(n) for n in names] if names else list(registry.indexed_runs().values())
    files = [registry.read_run(d) for d in dirs]
    slurm_ids = [f.job_id for f in files if f.job_id and not _is_local(f)]
    states = slurm.query_states(slurm_ids) if slurm_ids else {}
    out = []
    for f in files:
        js = _local_state(f) if _is_local(f) else states.get(f.job_id) or slurm.JobState(
            f.job_id, "UNKNOWN", False, slurm.STATE_MEANINGS["UNKNOWN"][1], "", "", "", 0, "")
        metrics = f.last_metrics
        max_steps = f.state.get("max_steps") or f.record.get("grpo_config", {}).get("max_steps", 0)
        out.append(RunStatus(
            run_id=f.run_id, run_dir=str(f.run_dir), site=f.site, job_id=f.job_id,
            state=js.state, finished=js.finished, meaning=js.meaning,
            phase=str(f.state.get("phase", "")),
            step=int(metrics.get("step", f.state.get("step", 0)) or 0),
            max_steps=int(max_steps or 0),
            reward=metrics.get("reward_mean"), tokens_per_s=metrics.get("tokens_per_s"),
            checkpoint_step=f.state.get("last_checkpoint_step"),
            checkpoint_time=f.state.get("last_checkpoint_time"),
            requeues=max(js.restarts, len(f.restarts)),
            nodes=js.nodes,
            restarts=tuple({k: r.get(k) for k in ("cause", "stopped_at_step", "resumed_from_step",
                                                  "steps_lost", "time")} for r in f.restarts),
        ))
    return out


def cancel(name: str) -> str:
    files = registry.read_run(registry.find_run(name))
    if not files.job_id:
        raise UserError(f"run {files.run_id} has no job", field="run")
    if _is_local(files):
        local.cancel_local(files.job_id)
    else:
        slurm.cancel(files.job_id)
    registry.record_job(files.run_dir, files.job_id, "cancelled")
    return files.job_id


def log_paths(name: str, rank: int | None) -> list[Path]:
    """Per-rank logs (``--rank N``) or every rank's, plus the node tasks' Slurm logs."""
    run_dir = registry.find_run(name)
    if rank is not None:
        path = run_dir / "logs" / f"rank-{rank}.log"
        if not path.exists():
            present = sorted(p.stem for p in (run_dir / "logs").glob("rank-*.log"))
            raise UserError(f"no log for rank {rank} yet", field="rank",
                            hint=f"present: {', '.join(present) or 'none'}")
        return [path]
    ranks = sorted((run_dir / "logs").glob("rank-*.log"),
                   key=lambda p: int(p.stem.split("-")[1]))
    nodes = sorted((run_dir / "submitit").glob("*_log.*"))
    return ranks + nodes
