"""Experiment trackers (TRL's ``report_to``) as ONE tracker run per hpc-grpo run, across every
requeue and retry.

Each attempt is a new process, and TRL's trackers would start a new W&B run or a second
TensorBoard series every time, and log again the steps between the checkpoint it resumed from
and the crash. Here W&B gets a run id derived from the run id and resumes it (offline under the
run directory unless the job's environment says ``WANDB_MODE``: compute nodes often have no
internet, and an online ``wandb.init`` without network waits minutes), TensorBoard writes into
``RUN_DIR/tensorboard`` and purges the steps an attempt is about to train again (SummaryWriter's
``purge_step``), and W&B, which cannot forget a step offline, is not sent a step its own files
already hold (wandb_log.py: a node killed mid-step loses W&B's unwritten records, so the metrics
lines are not the measure; those steps are sent again).

The environment and the decisions are pure functions; ``install`` swaps transformers' two
callbacks for the subclasses below on the ranks (only rank 0 writes: transformers checks
``is_world_process_zero`` in every tracker callback).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.observe import wandb_log

WANDB_DIR = "wandb"  # W&B writes RUN_DIR/wandb/offline-run-<time>-<id> (one per attempt)
TENSORBOARD_DIR = "tensorboard"
STATE_KEY = "tracker_logged_through"  # state.json: the highest step any attempt sent to trackers
SYNC_KEY = "tracker_sync"  # state.json: the command that uploads the offline W&B run
DEFAULT_PROJECT = "hpc-grpo"


def reporters(report_to: Any) -> tuple[str, ...]:
    """TRL's report_to as a tuple of names; "none"/None/[] is ()."""
    if report_to is None:
        return ()
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    return tuple(str(n) for n in names if str(n) != "none")


def uses(names: Iterable[str], tracker: str) -> bool:
    """Whether report_to names this tracker ("all" names every installed one)."""
    names = tuple(names)
    return tracker in names or "all" in names


def wandb_run_id(run_id: str) -> str:
    """A W&B run id that is the same on every attempt: the run id with characters W&B refuses
    (/ \\ # ? % :) replaced, and a short hash when that changed it or cut it to 64 characters."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", run_id)
    if safe == run_id and len(safe) <= 64:
        return safe
    digest = hashlib.sha1(run_id.encode()).hexdigest()[:8]
    return f"{safe[:55]}-{digest}"


def tracker_env(run_id: str, run_dir: Path, names: Iterable[str],
                environ: Mapping[str, str]) -> dict[str, str]:
    """Environment variables to set on this rank before the trainer is built.

    The run's identity (W&B run id, resume, directories) is ours; the mode and project are the
    user's when the job's environment sets them."""
    names = tuple(names)
    env: dict[str, str] = {}
    if uses(names, "wandb"):
        env.update(WANDB_RUN_ID=wandb_run_id(run_id), WANDB_RESUME="allow",
                   WANDB_DIR=str(run_dir))
        env["WANDB_MODE"] = environ.get("WANDB_MODE") or "offline"
        env["WANDB_PROJECT"] = environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
    if uses(names, "tensorboard"):
        env["TENSORBOARD_LOGGING_DIR"] = str(run_dir / TENSORBOARD_DIR)
    return env


def sync_command(run_dir: Path, env: Mapping[str, str]) -> str:
    """The one command that uploads an offline W&B run (all attempts, in order), or ""."""
    if env.get("WANDB_MODE") not in ("offline", "dryrun"):
        return ""
    wandb_dir = shlex.quote(str(run_dir / WANDB_DIR))
    return f"wandb sync --project {shlex.quote(env['WANDB_PROJECT'])} {wandb_dir}/offline-run-*"


def logged_through(state: RunState, metric_steps: Iterable[int]) -> int:
    """The highest step an earlier attempt may have sent to the trackers: the metrics lines
    before they are cut back to the checkpoint, or what an earlier attempt recorded."""
    return max(max(metric_steps, default=0), state.tracker_logged_through)


def purge_step(resume_step: int, through: int) -> int | None:
    """TensorBoard's purge_step: the first step this attempt logs, when an earlier attempt
    logged it already (events from that step on are dropped by every TensorBoard reader)."""
    return resume_step + 1 if through > resume_step else None


def prepare(run_id: str, run_dir: Path, names: Iterable[str], previous: RunState,
            lead: bool) -> int:
    """Set this rank's tracker environment; rank 0 also records in state.json the highest step
    the trackers have (before the metrics lines are cut back) and the W&B sync command.
    Returns that step (0 on the other ranks, which log nothing)."""
    names = tuple(names)
    if not names:
        return 0
    env = tracker_env(run_id, run_dir, names, os.environ)
    os.environ.update(env)
    if not lead:
        return 0
    steps = [int(r.get("step", 0)) for r in rundir.read_jsonl(run_dir / contract.METRICS_JSONL)]
    through = logged_through(previous, steps)
    rundir.update_state(run_dir, **{STATE_KEY: through, SYNC_KEY: sync_command(run_dir, env)})
    return through


def finish() -> None:
    """Close the W&B run: the ranks leave through os._exit, which skips W&B's exit hook."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """Replace transformers' W&B and TensorBoard callbacks by the resuming ones; returns notes."""
    names, resume_step, through = ctx.trackers, ctx.resume_step, ctx.logged
    notes = []
    if uses(names, "tensorboard"):
        from transformers.integrations import TensorBoardCallback  # here: kept out of the module's import

        if trainer.pop_callback(TensorBoardCallback) is not None:
            trainer.add_callback(_tensorboard_class()(purge_step(resume_step, through)))
            notes.append(f"tensorboard: {TENSORBOARD_DIR}/ in the run directory")
    if uses(names, "wandb"):
        from transformers.integrations import WandbCallback  # here: kept out of the module's import

        if trainer.pop_callback(WandbCallback) is not None:
            run_id = os.environ.get("WANDB_RUN_ID", "")
            have = wandb_log.highest_step(Path(os.environ.get("WANDB_DIR", ".")), run_id)
            skip = max(have or 0, resume_step)
            trainer.add_callback(_wandb_class()(skip_through=skip))
            notes.append(f"wandb: run id {run_id}, mode {os.environ.get('WANDB_MODE')}, "
                         f"W&B's files hold steps to {have or 0}")
    return notes


def _tensorboard_class() -> Any:
    from transformers.integrations import TensorBoardCallback  # here: kept out of the module's import

    class ResumingTensorBoardCallback(TensorBoardCallback):  # type: ignore[misc]
        """Writes into the run's one TensorBoard directory; the first writer of an attempt
        purges the steps an earlier attempt logged past the checkpoint resumed from."""

        def __init__(self, purge: int | None) -> None:
            super().__init__()
            self._purge = purge

        def _init_summary_writer(self, args: Any) -> None:
            self.tb_writer = self._SummaryWriter(log_dir=self.logging_dir, purge_step=self._purge)
            self._purge = None

    return ResumingTensorBoardCallback


def _wandb_class() -> Any:
    from transformers.integrations import WandbCallback  # here: the module imports without the training stack

    class ResumingWandbCallback(WandbCallback):  # type: ignore[misc]
        """Sends W&B no step its files hold already: offline, a W&B run cannot rewind, so the
        steps retrained after a crash keep their first values there."""

        def __init__(self, skip_through: int) -> None:
            super().__init__()
            self._skip_through = skip_through

        def on_log(self, args: Any, state: Any, control: Any, model: Any = None,
                   logs: Any = None, **kwargs: Any) -> None:
            if state.global_step <= self._skip_through:
                return
            super().on_log(args, state, control, model=model, logs=logs, **kwargs)

    return ResumingWandbCallback
