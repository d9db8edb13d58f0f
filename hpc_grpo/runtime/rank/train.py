"""One GRPO rank: `python -m hpc_grpo.runtime.rank.train RUN_DIR`, started by torchrun on every rank.

Order matters: signal handlers first (a stop during start-up is not lost), then the process
group, the rank checks and the hardware check (a bad layout, or nodes with less GPU or host
memory than the plan assumed, fail before the model loads), then resume selection, then TRL.
Rank 0 is the only writer of state.json, metrics.jsonl, startup.jsonl and summary.json. An error
before the first step that every rank raises alike is a configuration error (shared/setup_failure.py),
not retried by the node task.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.rank.checkpoints import folders, prefetch, restart_record, universal
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.data.dataset import check_prompt_bound, longest_prompt_tokens
from hpc_grpo.runtime.rank.data.job_inputs import load_inputs
from hpc_grpo.runtime.rank.generation import engine_weights
from hpc_grpo.runtime.rank.observe import (
    completions,
    heartbeat,
    phases,
    startup_profile,
    startup_times,
    tracking,
)
from hpc_grpo.runtime.rank.observe.summary import write_summary
from hpc_grpo.runtime.rank.setup import grpo_args, hardware_check, model_load, placement, startup_heap
from hpc_grpo.runtime.rank.setup.model_load import check_quantization
from hpc_grpo.runtime.rank.setup.placement import RuntimeCheckError
from hpc_grpo.runtime.rank.setup.process_group import device_problems, setup_distributed
from hpc_grpo.runtime.shared import attempt_nodes, setup_failure, vllm_address
from hpc_grpo.runtime.shared.signals import StopFlag, request_cause
from hpc_grpo.runtime.shared.staged import dataset_name, describe, model_source


def _pick_resume(run_dir: Path) -> Path | None:
    """Rank 0 picks the newest complete checkpoint and tells everyone, so all ranks agree."""
    import torch.distributed as dist  # here: the module imports without torch

    choice: list[Any] = [None]
    if dist.get_rank() == 0:
        # a killed save's folder: never resumed from, and in the way of this attempt's saves
        folders.remove_incomplete(run_dir / contract.CHECKPOINTS)
        found = folders.newest_complete(run_dir / contract.CHECKPOINTS)
        choice[0] = str(found) if found else None
    dist.broadcast_object_list(choice, src=0)
    return Path(choice[0]) if choice[0] else None


def _grpo_args(run: RunRecord, run_dir: Path, rank: int) -> tuple[Any, list[str]]:
    """TRL's GRPOConfig for this rank; rank 0 records the exact keyword arguments TRL got."""
    with startup_heap.collector_paused(os.environ):
        from trl import GRPOConfig  # transformers, accelerate, datasets: the collector paused

    known = [f.name for f in dataclasses.fields(GRPOConfig)]
    kwargs, notes = grpo_args.grpo_kwargs(run, run_dir, known)
    if vllm_address.server_mode(run):
        kwargs.update(vllm_address.grpo_server_fields(os.environ,  # a recipe's own timeout stays
                                                      kwargs.get("vllm_server_timeout")))
    args = GRPOConfig(**kwargs)
    if rank == 0:  # to reproduce or compare a run without hpc-grpo
        rundir.write_json_atomic(run_dir / contract.GRPO_CONFIG_JSON, kwargs)
    return args, notes


def _inputs(run: RunRecord) -> tuple[Any, Any, Any]:
    """Rewards, prompts (with the columns the rewards need) and tokenizer, and QLoRA's needs,
    checked before the model loads (every rank fails alike). The rewards are not called here:
    user rewards may have side effects per call; the login node called them once (inputs_probe).
    A staged model or dataset loads from its pinned snapshot folder (shared/staged.py)."""
    print(f"[train] {describe(run)}", flush=True)
    check_quantization(run.peft, run.device)
    found = load_inputs(dataclasses.replace(run.dataset, name=dataset_name(run)), run.reward_funcs,
                        run.reward_kwargs, run.reward_weights, model_source(run), run.model_load)
    check_prompt_bound(longest_prompt_tokens(found.dataset, found.tokenizer),
                       run.dataset.max_prompt_length, run.dataset.name)
    return found.rewards, found.dataset, found.tokenizer


def _finish(run_dir: Path, run: RunRecord, **state: Any) -> None:
    """Rank 0: summary.json, reward_curve.png and state.json phase "done"."""
    summary = write_summary(run_dir, {"run_id": run.run_id}, predicted=run.predicted_step_s)
    rundir.update_state(run_dir, phase="done", reward_delta=summary["reward_delta"], **state)


def _trainer(run: RunRecord, run_dir: Path, args: Any, inputs: tuple[Any, Any, Any],
             flag: StopFlag, device: Any, within: dict[str, float]) -> tuple[Any, Any]:
    """GRPOTrainer with the project's callbacks; returns it and the graceful-stop callback.
    The imports, the model load and the engine start inside it are timed into ``within``
    (rank/observe/startup_times.py)."""
    began = time.perf_counter()
    with startup_heap.collector_paused(os.environ):
        from trl import GRPOTrainer  # and vLLM on GPU nodes
        from trl.extras import profiling
    # here, not at the top: it imports transformers, which must come after main's
    # startup_heap.share_package_map (TRL has imported it by now)
    from hpc_grpo.runtime.rank.callbacks import (
        DiskSpaceCallback,
        GracefulStopCallback,
        MetricsCallback,
    )
    from hpc_grpo.runtime.rank.checkpoints.marker import CheckpointMarkerCallback

    if not phases.patch_profiling(profiling):  # metrics lines then carry no step split
        print("[train] this TRL has no ProfilingContext hook: no per-phase step times", flush=True)
    tagged = phases.tag_engine(phases.engine_class())  # on CPU too: CPU runs take the GPU path
    if run.device == "cuda" and not tagged:
        print("[train] this TRL's vLLM engine class is not known: no GPU memory per phase", flush=True)
    rewards, dataset, tokenizer = inputs
    stop = GracefulStopCallback(run_dir, flag, device)
    keep = folders.retention_limit(run.grpo_config)  # applied after each marker, not by TRL
    targets = startup_times.trainer_targets(run.vllm.mode)  # TRL's trainer module imports vLLM
    within["trainer_import"] = (imported := time.perf_counter()) - began
    frozen = startup_heap.freeze_imported_heap(os.environ)  # before the engine's collections
    within["heap_freeze"] = time.perf_counter() - imported  # its full collection, apart
    print(f"[train] imports done; {frozen} objects frozen out of the collector's walks", flush=True)
    constructing, timed_before = time.perf_counter(), sum(within.values())
    with engine_weights.engine_from_pushed_weights(os.environ), \
            startup_times.timed_calls(within, targets):
        trainer = GRPOTrainer(
            model=model_source(run),  # a staged commit's snapshot folder (shared/staged.py)
            reward_funcs=rewards,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[stop, CheckpointMarkerCallback(run_dir, keep, device), MetricsCallback(run_dir),
                       DiskSpaceCallback(run_dir, run.checkpoint_bytes, device)],  # last: every save
            **model_load.trainer_kwargs(run),  # LoRA / QLoRA
        )
    timed = sum(within.values()) - timed_before  # model load, engine start or server connect
    within["trainer_init_other"] = time.perf_counter() - constructing - timed
    return trainer, stop


def _marker(trainer: Any) -> Any:
    """The trainer's CheckpointMarkerCallback (``_trainer`` gives it every trainer)."""
    from hpc_grpo.runtime.rank.checkpoints.marker import (
        CheckpointMarkerCallback,  # transformers: see _trainer
    )

    return next(callback for callback in trainer.callback_handler.callbacks
                if isinstance(callback, CheckpointMarkerCallback))


@dataclass(frozen=True)
class Ready:
    """What the first step needs: the trainer, its stop callback, its arguments, the resume
    and its step (0 from scratch)."""

    trainer: Any
    stop: Any
    args: Any
    resume: Path | None
    resume_step: int


class SetupFailed(Exception):
    """This rank raised before the first step; ``configuration`` is the exception line when
    every rank raised it alike (rank 0 has recorded it), else ""."""

    def __init__(self, line: str, configuration: str) -> None:
        super().__init__(line)
        self.configuration = configuration


def _prepare(run: RunRecord, run_dir: Path, flag: StopFlag, device: Any, rank: int,
             previous: RunState, attempt: str, clock: startup_times.StartupClock,
             profiler: Any) -> Ready | None:
    """Arguments, rank checks, inputs, resume, the trainer and its hooks (hooks.py); None when
    the newest checkpoint is already at max_steps (rank 0 has recorded it as done). The parts
    are timed into ``clock.within`` (see ``_trainer``)."""
    within = clock.within
    importing = time.perf_counter()
    with startup_heap.collector_paused(os.environ):  # transformers and peft come in here
        # here, not at the top: timed as runtime_imports, with the collector paused
        from hpc_grpo.runtime.rank import hooks

    lead = rank == 0
    began = time.perf_counter()
    within["runtime_imports"] = began - importing  # epoch_order: transformers' trainer utilities
    args, notes = _grpo_args(run, run_dir, rank)
    device_id, problems = device_problems(run, args, device)
    placement.run_rank_checks(run, run_dir, device_id=device_id, extra=problems)
    print(f"[train] rank checks passed; notes: {notes or 'none'}", flush=True)
    for note in hardware_check.check(run, device):  # less than planned raises on every rank
        print(f"[hardware] {note}", flush=True)
    inputs = _inputs(run)
    within["checks_and_inputs"] = (checked := time.perf_counter()) - began
    trackers = tracking.reporters(args.report_to)
    logged = tracking.prepare(run.run_id, run_dir, trackers, previous, lead)  # before the cut

    resume = _pick_resume(run_dir)
    resume_step = (folders.checkpoint_step(resume) or 0) if resume else 0
    if lead:
        restart_record.record_resume(run_dir, previous, attempt, notes, resume, resume_step,
                                         nodes=run.nodes)
    if resume is not None and 0 < args.max_steps <= resume_step:
        print(f"[train] {resume} is already at max_steps {args.max_steps}: done", flush=True)
        if lead:
            _finish(run_dir, run, step=resume_step, max_steps=args.max_steps)
        return None

    # a ZeRO checkpoint saved at another world size: converted once (checkpoints/universal.py)
    conversion = universal.plan(run, resume)
    converted = universal.prepare(conversion, rank)
    if converted is not None:
        universal.load_universal(args)
        print(f"[checkpoint] {converted}", flush=True)
    # while the trainer is built; a universal load reads other files than the saved ranks'
    reading = prefetch.start(run, None if conversion else resume, rank, os.environ)
    before_trainer = time.perf_counter() - checked
    trainer, stop = _trainer(run, run_dir, args, inputs, flag, device, within)
    built = time.perf_counter()
    hooks.install(trainer, HookContext(
        run=run, run_dir=run_dir, rank=rank, env=os.environ, attempt=attempt, resume=resume,
        resume_step=resume_step, prefetch=reading, trackers=trackers, logged=logged,
        save_clock=_marker(trainer).clock, clock=clock, profiler=profiler,
        marker=_marker(trainer)))
    within["resume_and_hooks"] = before_trainer + time.perf_counter() - built
    return Ready(trainer, stop, args, resume, resume_step)


def train(run: RunRecord, run_dir: Path, flag: StopFlag, started: float) -> int:
    """Check, resume, train, and record how it ended; returns the process exit code."""
    import torch.distributed as dist  # here: the module imports without torch

    clock = startup_times.StartupClock(started)
    device = setup_distributed(run)
    clock.mark()
    rank = dist.get_rank()
    lead = rank == 0  # the single writer of state.json, metrics.jsonl and summary.json
    attempt = os.environ.get("HPC_GRPO_ATTEMPT", f"rank0-pid-{os.getpid()}")
    previous = rundir.load_state(run_dir) if lead else RunState()
    if lead:
        if rundir.consume_stale_stop_request(run_dir, started, attempt):
            print("[train] moved a stop-request left by an earlier attempt", flush=True)
        rundir.update_state(run_dir, phase="starting", attempt=attempt, max_steps=run.max_steps,
                            started=started, message="", stop_reason=None, stop_cause=None)
    profiler = startup_profile.start(run_dir, rank, os.environ)  # HPC_GRPO_STARTUP_PROFILE=1
    try:
        ready = _prepare(run, run_dir, flag, device, rank, previous, attempt, clock, profiler)
    except RuntimeCheckError:
        raise  # every rank saw the same gathered problems already
    except Exception as exc:  # no step yet: did every rank fail alike? (shared/setup_failure.py)
        traceback.print_exc()
        startup_profile.write_after_failure(profiler, run_dir)
        agreed = setup_failure.settle(run_dir, attempt, rank, run.world_size, exc)
        raise SetupFailed(setup_failure.exception_line(exc), agreed) from exc
    if ready is None:
        return 0

    trainer, stop, args, resume = ready.trainer, ready.stop, ready.args, ready.resume
    if stop.before_training(ready.resume_step):  # a cancel while the ranks started: no step
        if lead:
            rundir.update_state(run_dir, phase="interrupted", step=ready.resume_step,
                                stop_reason=stop.reason, max_steps=args.max_steps,
                                **({"stop_cause": c} if (c := request_cause(stop.reason)) else {}))
        tracking.finish()
        print(f"[train] stopped before training, at step {ready.resume_step}", flush=True)
        return 0
    clock.mark()
    if lead:
        rundir.update_state(run_dir, phase="training", max_steps=args.max_steps)
    print(f"[train] training from {resume or 'scratch'} to step {args.max_steps}", flush=True)
    tables = run_dir / contract.LOGS / completions.COMPLETIONS_LOG  # not in the rank log (#58)
    if lead and getattr(args, "log_completions", False):
        print(f"[train] log_completions: TRL's completions tables go to {tables}", flush=True)
    try:
        with startup_times.timed_calls(clock.preparing,  # prepare_parts_s
                                       startup_times.prepare_targets()), \
                completions.tables_to(tables):
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except engine_weights.EngineNotFilled as exc:  # every rank alike, before its first step
        agreed = setup_failure.settle(run_dir, attempt, rank, run.world_size, exc)
        raise SetupFailed(setup_failure.exception_line(exc), agreed) from exc
    tracking.finish()

    step = trainer.state.global_step
    if lead:
        if stop.stopped_at is not None and step < trainer.state.max_steps:
            cause = request_cause(stop.reason)  # a signal's cause is the node task's to name
            rundir.update_state(run_dir, phase="interrupted", step=step, stop_reason=stop.reason,
                                max_steps=trainer.state.max_steps,
                                **({"stop_cause": cause} if cause else {}))
        else:
            _finish(run_dir, run, step=step, max_steps=trainer.state.max_steps)
    print(f"[train] finished at step {step}", flush=True)
    return 0


def _shutdown() -> None:
    """Barrier, then destroy the group: exiting with it alive intermittently aborts (SIGABRT)."""
    import torch.distributed as dist  # here: the module imports without torch

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Entry point on every rank; exit 0 for done/interrupted/already-done, 1 for failures."""
    started = time.time()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hpc_grpo.runtime.rank.train RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    rank = int(os.environ.get("RANK", "0"))
    rundir.redirect_output(run_dir, rank)
    startup_heap.share_package_map(os.environ)  # before transformers and TRL are imported
    heartbeat.start(run_dir, rank, os.environ.get("HPC_GRPO_ATTEMPT", ""))  # stack dumps too

    flag = StopFlag()
    flag.install(contract.ALWAYS_STOP)  # at once: the agent passed these down as ignored
    # at this attempt's node count (min_nodes: its node task's HPC_GRPO_ATTEMPT_NODES)
    run = attempt_nodes.for_rank(rundir.load_run(run_dir), os.environ)
    flag.install(run.stop.signals)
    try:
        code = train(run, run_dir, flag, started)
    except RuntimeCheckError as exc:
        print(f"[train] {exc}", flush=True)
        _shutdown()  # every rank saw the same gathered problems and raised the same error
        return 1
    except SetupFailed as exc:  # rank 0 recorded it; no barrier: a peer may be stuck elsewhere
        kind = "configuration error, not retried" if exc.configuration else "failed before step 1"
        print(f"[train] {kind}: {exc}", flush=True)
        return 1
    except Exception as exc:
        traceback.print_exc()
        tracking.finish()
        full = folders.disk_full_message(
            exc, folders.free_bytes_or_none(run_dir / contract.CHECKPOINTS))
        if full:
            print(f"[train] {full}", flush=True)
            if rank == 0:  # frees the space the record of why needs
                folders.remove_incomplete(run_dir / contract.CHECKPOINTS)
        if rank == 0:
            rundir.update_state(run_dir, phase="failed",
                                message=full.removeprefix("disk full: ")
                                or f"{type(exc).__name__}: {exc}",
                                **({"stop_cause": "disk full"} if full else {}))
        return 1
    _shutdown()
    return code


def exit_now(code: int) -> None:
    """Leave without interpreter teardown once everything is written. A rank that aborted there
    ("terminate called without an active exception", SIGABRT, after the group was destroyed)
    made its torchrun agent fail, and the other nodes' agents then waited 300 s in torchelastic's
    exit barrier, holding a finished job's nodes (seen on the sandbox cluster)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

