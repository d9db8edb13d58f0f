"""The completions one generation trains several steps on, kept in the checkpoint when a save
falls between those steps, so a resume trains on them instead of generating anew.

Why: TRL 1.16 generates once every ``steps_per_generation × num_iterations`` micro-steps
(``generate_every``) and keeps the split result in memory (``trainer._buffered_inputs``), indexed
by a micro-step counter (``trainer._step``) that starts at 0 in every process. A checkpoint holds
neither. A run stopped inside such a block (e.g. steps_per_generation 2, after step 5) resumed on
a fresh generation with the counter out of phase: every later step differed from the
uninterrupted run, and the generation rhythm shifted for good. Stopping only at block ends
would cost up to ``generate_every`` micro-steps of the signal's lead time; keeping the buffer
costs one small file per rank (token ids, masks, advantages, log-probs of one generation batch).

What: after each save every rank writes ``generation-buffer/rank-<R>.pt`` into the new checkpoint
when its counter is inside a block, with the counter and the settings that shape the buffer; at
resume each rank loads its own file and sets both back before the first step. At a block end
nothing is written: the next step generates anyway, and the counter only matters modulo
``generate_every``. A file written under other settings (or a missing one, with a different
world size) is not used; the run then regenerates, as TRL alone would, and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_grpo.rundir import contract
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.observe import heartbeat

FOLDER = contract.GENERATION_BUFFER
RESTORED = "generation buffer"  # how load's line starts when it set the buffer back


def _everywhere(flag: bool) -> bool:
    """Whether flag holds on every rank (the ranks' process group; True without one)."""
    import torch.distributed as dist  # here: the module imports without torch

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    flags: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(flags, flag)
    return all(flags)


def shape(trainer: Any, world_size: int) -> dict[str, Any]:
    """The settings a saved buffer is only valid under: its split, and which entries the loss
    reads from it (reference log-probs with beta > 0, vLLM's importance-sampling ratio)."""
    args = trainer.args
    return {"world_size": world_size, "steps_per_generation": int(args.steps_per_generation),
            "num_iterations": int(trainer.num_iterations),
            "per_device_train_batch_size": int(args.per_device_train_batch_size),
            "gradient_accumulation_steps": int(args.gradient_accumulation_steps),
            "beta": float(getattr(trainer, "beta", 0.0)),
            "use_vllm": bool(getattr(trainer, "use_vllm", False)),
            "importance_sampling": bool(getattr(trainer, "vllm_importance_sampling_correction",
                                                False)),
            "loss_type": str(getattr(trainer, "loss_type", ""))}


def _generate_every(trainer: Any) -> int:
    """Micro-steps between two generations (TRL's ``generate_every``)."""
    return int(trainer.args.steps_per_generation) * int(trainer.num_iterations)


def inside_block(trainer: Any) -> bool:
    """True when the next micro-step would reuse the buffer rather than generate."""
    buffered = getattr(trainer, "_buffered_inputs", None)
    return buffered is not None and trainer._step % _generate_every(trainer) != 0


def save(trainer: Any, checkpoint: Path, rank: int, world_size: int) -> Path | None:
    """Write this rank's buffer into checkpoint when a resume would need it; the path or None."""
    import torch  # here: the module imports without torch

    if not inside_block(trainer):
        return None
    folder = checkpoint / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank-{rank}.pt"
    tmp = folder / f".rank-{rank}.pt.tmp"
    torch.save({"step": int(trainer._step), "shape": shape(trainer, world_size),
                "buffer": trainer._buffered_inputs}, tmp)
    tmp.replace(path)
    return path


def load(trainer: Any, checkpoint: Path, rank: int, world_size: int, device: Any) -> str:
    """Set the buffer and micro-step counter back from checkpoint; a line saying what was done
    ("" when the checkpoint ends a block and there is nothing to restore)."""
    import torch  # here: the module imports without torch

    folder = checkpoint / FOLDER
    path = folder / f"rank-{rank}.pt"
    if not path.exists():
        if folder.is_dir():
            return (f"{checkpoint.name} holds no generation buffer for rank {rank} (saved with "
                    "another world size?): this step generates anew, the run is no longer "
                    "step-for-step the uninterrupted one")
        return ""
    where = torch.device(device)
    where = torch.device("cpu") if where.type == "cpu" else where  # torch has no "cpu:0" location
    try:
        saved = torch.load(path, map_location=where, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file costs exactness, not the run
        return f"{path} cannot be read ({type(exc).__name__}: {exc}): not used, this step generates anew"
    wanted = shape(trainer, world_size)
    if saved.get("shape") != wanted:
        return (f"{path} was saved under {saved.get('shape')}, this run has {wanted}: not used, "
                "this step generates anew")
    trainer._buffered_inputs = saved["buffer"]
    trainer._step = int(saved["step"])
    return f"{RESTORED} of micro-step {trainer._step} restored from {path}"


def steps_to_generation(trainer: Any) -> int:
    """Optimizer steps up to and including the next one that generates."""
    generate_every = _generate_every(trainer)
    left = generate_every - trainer._step % generate_every
    return -(-left // int(trainer.args.gradient_accumulation_steps)) + 1


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``save_with_checkpoints``; its line where it has one."""
    line = save_with_checkpoints(trainer, ctx.rank, ctx.run.world_size, ctx.resume)
    return [line] if line else []


def save_with_checkpoints(trainer: Any, rank: int, world_size: int, resume: Path | None) -> str:
    """Save the buffer with every checkpoint, inside ``_save_checkpoint``: before the callbacks'
    ``on_save``, whose barrier and completion marker then cover it too; restore it from resume.

    A restored buffer means the attempt's first steps do not generate: the heartbeat then keeps
    the start-up allowance until a generating step has been measured, or the watchdog would
    judge the first generation by training-only steps (heartbeat.py ``hold_reference``).
    """
    line = load(trainer, resume, rank, world_size, trainer.accelerator.device) if resume else ""
    restored = line.startswith(RESTORED)
    if world_size > 1 and not _everywhere(restored):  # one rank alone would skip collectives
        if restored:
            trainer._buffered_inputs, trainer._step = None, 0
            line = f"{line}, then dropped: another rank could not restore its own"
        restored = False
    if restored and heartbeat.BEAT is not None:
        heartbeat.BEAT.hold_reference(steps_to_generation(trainer))
    original = trainer._save_checkpoint

    def save_checkpoint(model: Any, trial: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(model, trial, *args, **kwargs)
        folder = Path(str(trainer.args.output_dir)) / f"checkpoint-{trainer.state.global_step}"
        save(trainer, folder, rank, world_size)
        return result

    trainer._save_checkpoint = save_checkpoint
    return line
