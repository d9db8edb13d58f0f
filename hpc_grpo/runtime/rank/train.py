"""One GRPO rank: `python -m hpc_grpo.runtime.rank.train RUN_DIR`, started by torchrun on every rank.

Order matters: signal handlers first (a stop during start-up is not lost), then the process
group and the rank checks (a bad layout fails before the model loads), then resume selection,
then TRL. Rank 0 is the only writer of state.json, metrics.jsonl and summary.json.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from hpc_grpo.runtime import rundir
from hpc_grpo.runtime.rank import checkpoints
from hpc_grpo.runtime.rank.placement import RuntimeCheckError
from hpc_grpo.runtime.rank.stop import StopFlag


def _setup_distributed(run: dict[str, Any]) -> Any:
    """Pin this rank's device and start the process group; returns the device for collectives."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    if run.get("device") == "cuda":
        index = local_rank if torch.cuda.device_count() > 1 else 0
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    backend = run.get("dist_backend") or ("nccl" if run.get("device") == "cuda" else "gloo")
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    if run.get("deepspeed"):
        import deepspeed  # its comm layer must wrap our group, or zero.Init sees world size 1

        deepspeed.init_distributed(dist_backend=backend)
    return device


def _device_problems(run: dict[str, Any], args: Any, device: Any) -> tuple[str, list[str]]:
    """On CUDA: the device's UUID (to catch two ranks on one GPU) and n_gpu/LOCAL_RANK checks."""
    if run.get("device") != "cuda":
        return "", []
    import torch

    from hpc_grpo.runtime.rank.placement import cuda_problems

    local_rank = int(os.environ["LOCAL_RANK"])
    problems = cuda_problems(args.n_gpu, args.device.index, local_rank, torch.cuda.device_count())
    if args.device != device:
        problems.append(f"Trainer uses {args.device} but the rank pinned {device}")
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", device))
    return f"{os.uname().nodename}:{uuid}", problems


def _pick_resume(run_dir: Path) -> Path | None:
    """Rank 0 picks the newest complete checkpoint and tells everyone, so all ranks agree."""
    import torch.distributed as dist

    choice: list[Any] = [None]
    if dist.get_rank() == 0:
        found = checkpoints.newest_complete(run_dir / rundir.CHECKPOINTS)
        choice[0] = str(found) if found else None
    dist.broadcast_object_list(choice, src=0)
    return Path(choice[0]) if choice[0] else None


def _check_prompts(run: dict[str, Any], dataset: Any, tokenizer: Any) -> None:
    """Every rank tokenizes the same prompts, so all fail alike before the model loads."""
    from hpc_grpo.runtime.rank.data import check_prompt_bound, longest_prompt_tokens

    block = run["dataset"]
    check_prompt_bound(longest_prompt_tokens(dataset, tokenizer), block.get("max_prompt_length"),
                       str(block["name"]))


def _finish(run_dir: Path, run: dict[str, Any], **state: Any) -> None:
    """Rank 0: summary.json, reward_curve.png and state.json phase "done"."""
    from hpc_grpo.runtime.rank.summary import write_summary

    summary = write_summary(run_dir, {"run_id": run.get("run_id")})
    rundir.update_state(run_dir, phase="done", reward_delta=summary["reward_delta"], **state)


def train(run: dict[str, Any], run_dir: Path, flag: StopFlag, started: float) -> int:
    """Check, resume, train, and record how it ended; returns the process exit code."""
    import torch.distributed as dist

    device = _setup_distributed(run)
    rank = dist.get_rank()
    attempt = os.environ.get("HPC_GRPO_ATTEMPT", f"rank0-pid-{os.getpid()}")
    max_steps = int((run.get("grpo_config") or {}).get("max_steps", -1))
    previous = rundir.read_state(run_dir) if rank == 0 else {}
    if rank == 0:
        if rundir.consume_stale_stop_request(run_dir, started):
            print("[train] moved a stop-request left by an earlier attempt", flush=True)
        rundir.update_state(
            run_dir,
            phase="starting",
            attempt=attempt,
            max_steps=max_steps,
            started=started,
            message="",
            stop_reason=None,
        )

    import dataclasses

    from trl import GRPOConfig

    from hpc_grpo.runtime.rank import grpo_args, placement

    known = [f.name for f in dataclasses.fields(GRPOConfig)]
    kwargs, notes = grpo_args.grpo_kwargs(run, run_dir, known)
    from hpc_grpo.runtime.node import vllm_server

    if vllm_server.server_mode(run):
        kwargs.update(vllm_server.grpo_server_fields(os.environ))
    args = GRPOConfig(**kwargs)
    if rank == 0:  # what TRL got, exactly: to reproduce or compare a run without hpc-grpo
        rundir.write_json_atomic(run_dir / "grpo_config.json", kwargs)
    device_id, problems = _device_problems(run, args, device)
    placement.run_rank_checks(run, run_dir, device_id=device_id, extra=problems)
    print(f"[train] rank checks passed; notes: {notes or 'none'}", flush=True)

    from hpc_grpo.runtime.models.tiny import load_tokenizer
    from hpc_grpo.runtime.rank.data import load_prompts
    from hpc_grpo.runtime.rank.rewards import resolve_rewards

    rewards = resolve_rewards(list(run.get("reward_funcs") or []))  # before the model loads
    dataset = load_prompts(run["dataset"])
    tokenizer = load_tokenizer(run["model"])
    _check_prompts(run, dataset, tokenizer)

    resume = _pick_resume(run_dir)
    resume_step = checkpoints.checkpoint_step(resume) if resume else 0
    if rank == 0:
        dropped = rundir.truncate_metrics(run_dir / rundir.METRICS_JSONL, resume_step or 0)
        rundir.update_state(
            run_dir,
            notes=notes,
            resumed_from=str(resume) if resume else None,
            step=resume_step,
            metrics_lines_dropped=dropped,
            stop_cause=None,
        )
        if previous.get("attempt") and previous.get("attempt") != attempt:
            from hpc_grpo.runtime.node import retry

            rundir.append_jsonl(run_dir / retry.RESTARTS, {
                "time": time.time(), "attempt": attempt, "previous_attempt": previous["attempt"],
                "cause": previous.get("stop_cause") or {
                    "done": "ended",
                    # ranks saved at a signal, but the node task was killed before naming it
                    "interrupted": "signal (cause not recorded)",
                }.get(str(previous.get("phase")), "killed (no stop recorded)"),
                "previous_phase": previous.get("phase"), "stopped_at_step": previous.get("step"),
                "resumed_from_step": resume_step or 0, "steps_lost": dropped,
            })
    if resume is not None and args.max_steps > 0 and (resume_step or 0) >= args.max_steps:
        print(f"[train] {resume} is already at max_steps {args.max_steps}: done", flush=True)
        if rank == 0:
            _finish(run_dir, run, step=resume_step, max_steps=args.max_steps)
        return 0

    from trl import GRPOTrainer
    from trl.extras import profiling

    from hpc_grpo.runtime.rank import phases
    from hpc_grpo.runtime.rank.callbacks import (
        CheckpointMarkerCallback,
        GracefulStopCallback,
        MetricsCallback,
    )

    if not phases.install(profiling):  # metrics lines then carry no step split
        print("[train] this TRL has no ProfilingContext hook: no per-phase step times", flush=True)
    stop = GracefulStopCallback(run_dir, flag, device)
    trainer = GRPOTrainer(
        model=str(run["model"]),
        reward_funcs=rewards,  # type: ignore[arg-type]
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[stop, CheckpointMarkerCallback(run_dir), MetricsCallback(run_dir)],
    )
    from hpc_grpo.runtime.rank import epoch_order, generation_record

    epoch_order.install(trainer)  # each epoch's data order as an uninterrupted run has it
    tp = int((run.get("vllm") or {}).get("tensor_parallel_size") or 1)
    generation_record.install(trainer, run_dir, rank, seed=rank // tp)
    if rank == 0:
        rundir.update_state(run_dir, phase="training", max_steps=args.max_steps)
    print(f"[train] training from {resume or 'scratch'} to step {args.max_steps}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    step = trainer.state.global_step
    if rank == 0:
        if stop.stopped_at is not None and step < trainer.state.max_steps:
            rundir.update_state(
                run_dir,
                phase="interrupted",
                step=step,
                stop_reason=stop.reason,
                max_steps=trainer.state.max_steps,
            )
        else:
            _finish(run_dir, run, step=step, max_steps=trainer.state.max_steps)
    print(f"[train] finished at step {step}", flush=True)
    return 0


def _shutdown() -> None:
    """Barrier, then destroy the group: exiting with it alive intermittently aborts (SIGABRT)."""
    import torch.distributed as dist

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

    flag = StopFlag()
    flag.install(["USR2", "TERM"])  # at once: the agent passed these down as ignored
    run = rundir.load_run(run_dir)
    flag.install((run.get("stop") or {}).get("signals") or [])
    try:
        code = train(run, run_dir, flag, started)
    except RuntimeCheckError as exc:
        print(f"[train] {exc}", flush=True)
        _shutdown()  # every rank saw the same gathered problems and raised the same error
        return 1
    except Exception as exc:
        traceback.print_exc()
        if rank == 0:
            rundir.update_state(run_dir, phase="failed", message=f"{type(exc).__name__}: {exc}")
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
