"""A ZeRO checkpoint saved at another world size, converted once before the trainer loads it.

Why: ``hpc-grpo resume RUN --nodes N`` may continue a DeepSpeed ZeRO run at another data-parallel
size (issue #60; which layouts may, rundir/reshard.py). Its optimizer (and ZeRO-3 parameter)
partitions are laid out for the saving ranks, and DeepSpeed refuses them at another size
(``engine._load_zero_checkpoint``: "Automatic adjustment of ZeRO's optimizer state partitioning
with a new world size is not currently supported"). Its universal checkpoint is the way round:
``ds_to_universal`` writes every parameter's full fp32 weights and Adam states beside the tag
folder and names them in ``latest_universal``; with ``"checkpoint": {"load_universal": true}``
``engine.load_checkpoint`` (called by transformers' ``deepspeed_load_checkpoint`` with no tag)
reads that folder and each rank cuts its own partition for the new size.

What: after the ranks agree on the checkpoint, rank 0 converts it when its marker's world size
differs from this job's (``python -m deepspeed.checkpoint.ds_to_universal --inject_missing_state``,
a child process: its memory is returned when it ends), marks the conversion complete, and
tells the other ranks, which wait in a broadcast. A folder converted by an earlier attempt or
resume is reused; one without the marker (a conversion killed half-way) is removed and done
again. A conversion that fails raises the same line on every rank (a configuration error, not
retried). This job's DeepSpeed config then loads universally; its own saves are ordinary ZeRO
checkpoints at the new size.

One repair after a ZeRO-3 universal load (``install``): DeepSpeed 0.19.8's
``load_hp_checkpoint_state_from_checkpoint_dir_stage3`` (runtime/zero/stage3.py) gives every
sub-group's Adam state one and the same ``step`` tensor, read once from the converted file, and
torch's Adam adds 1 to each group's step in place: with transformers' two parameter groups
(weight decay and none) the count rose by 2 an optimizer step (a CPU run saved at step 2 and
resumed at another size saved step 6 at step 4, 10 at step 6), and Adam's bias correction
(1 - beta^step) ran ahead. At train begin each group gets its own copy (ZeRO-1/2's load sets
the step per group: their counts were right).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.checkpoints import marker_world_size
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.context import HookContext

MODULE = "deepspeed.checkpoint.ds_to_universal"


class ConversionError(RuntimeError):
    """ds_to_universal failed; every rank raises it with the same line."""


@dataclass(frozen=True)
class Conversion:
    """A resume that loads ``checkpoint`` through its universal conversion."""

    checkpoint: Path
    tag: str  # DeepSpeed's tag folder inside it (``latest``)
    zero_stage: int
    was: int  # the world size that saved it
    now: int

    @property
    def folder(self) -> Path:
        return reshard.universal_folder(self.checkpoint, self.tag)

    def line(self) -> str:
        return reshard.conversion_line(self.zero_stage, self.was, self.now)


def plan(run: RunRecord, resume: Path | None) -> Conversion | None:
    """The conversion this resume needs, None when it loads the checkpoint as saved. Raises
    ConversionError where the layout may not change size (reshard.refusal: a run.json the
    launcher would have refused) or the checkpoint has no DeepSpeed tag to convert."""
    zero = run.deepspeed.zero_stage if run.deepspeed is not None else None
    was = marker_world_size(resume) if resume is not None else None
    if resume is None or zero is None or not reshard.needs_conversion(zero, was, run.world_size):
        return None
    assert was is not None  # needs_conversion
    why = reshard.refusal(zero, run.vllm.mode)
    if why is not None:
        raise ConversionError(f"{resume.name} was saved by {was} ranks, this job has "
                              f"{run.world_size}: {why}")
    tag = reshard.deepspeed_tag(resume)
    if tag is None:
        raise ConversionError(f"{resume.name} was saved by {was} ranks under ZeRO-{zero} but has "
                              "no DeepSpeed tag folder (its 'latest' file) to convert")
    return Conversion(resume, tag, zero, was, run.world_size)


def command(conversion: Conversion, python: str = sys.executable) -> list[str]:
    """ds_to_universal's command line: one worker each (the ranks' CPUs are the job's; the
    parallel pass forks a process pool per step), the client state injected (transformers'
    checkpoints have no ``universal_checkpoint_info``: the conversion asserts it otherwise)."""
    return [python, "-m", MODULE, "--input_folder", str(conversion.checkpoint / conversion.tag),
            "--output_folder", str(conversion.folder), "--num_extract_workers", "1",
            "--num_merge_workers", "1", "--inject_missing_state"]


Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def convert(conversion: Conversion, runner: Runner = _run) -> str:
    """Rank 0: convert, or reuse a finished conversion; the line for the ranks' logs."""
    where = f"{conversion.checkpoint.name}/{conversion.folder.name}"
    if reshard.converted(conversion.checkpoint, conversion.tag):
        return f"{conversion.line()}: reused {where}"
    redone = reshard.clear_unfinished(conversion.checkpoint, conversion.tag)
    began = time.perf_counter()
    done = runner(command(conversion))
    seconds = time.perf_counter() - began
    print(done.stdout + done.stderr, flush=True)  # rank 0's log keeps DeepSpeed's own lines
    if done.returncode != 0:
        last = [x for x in (done.stderr or done.stdout).strip().splitlines() if x.strip()]
        raise ConversionError(f"ds_to_universal on {where} exited {done.returncode}: "
                              f"{last[-1] if last else 'no output'}")
    reshard.mark_converted(conversion.checkpoint, conversion.tag, conversion.was, seconds)
    again = ", an unfinished one removed first" if redone else ""
    return f"{conversion.line()}: {where} in {seconds:.1f} s{again}"


def prepare(conversion: Conversion | None, rank: int) -> str | None:
    """Every rank: rank 0 converts while the others wait in a broadcast of its outcome; the
    line, or ConversionError on every rank alike."""
    if conversion is None:
        return None
    import torch.distributed as dist  # here: the module imports without torch

    outcome: list[Any] = [None]
    if rank == 0:
        try:
            outcome[0] = ("ok", convert(conversion))
        except Exception as exc:  # told to every rank, raised by each
            outcome[0] = ("error", f"{type(exc).__name__}: {exc}")
    dist.broadcast_object_list(outcome, src=0)
    kind, line = outcome[0]
    if kind != "ok":
        raise ConversionError(line)
    return str(line)


def load_universal(args: Any) -> None:
    """This job's DeepSpeed config reads ``latest_universal`` instead of ``latest``. Set on the
    parsed config GRPOConfig holds (accelerate hands that very dict to ``deepspeed.initialize``);
    the run's deepspeed.json stays the run's, for later attempts at this size."""
    config = args.hf_deepspeed_config.config
    config.setdefault("checkpoint", {})["load_universal"] = True


def loads_universal(args: Any) -> bool:
    """This job's DeepSpeed config loads universally (``load_universal`` set it)."""
    config = getattr(getattr(args, "hf_deepspeed_config", None), "config", None) or {}
    return bool(config.get("checkpoint", {}).get("load_universal"))


def innermost(optimizer: Any) -> Any:
    """The torch optimizer inside accelerate's and DeepSpeed's wrappers (each ``.optimizer``)."""
    while getattr(optimizer, "optimizer", None) is not None:
        optimizer = optimizer.optimizer
    return optimizer


def unshare_steps(state: Any) -> int:
    """Give every entry of an optimizer's ``state`` its own ``step`` tensor; how many shared one."""
    seen: set[int] = set()
    shared = 0
    for entry in state.values():
        step = entry.get("step") if isinstance(entry, dict) else None
        if step is None or not hasattr(step, "clone"):
            continue
        if id(step) in seen:
            entry["step"] = step.clone()
            shared += 1
        seen.add(id(entry["step"]))
    return shared


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: after a ZeRO-3 universal load, each parameter group's own Adam step count."""
    zero = ctx.run.deepspeed.zero_stage if ctx.run.deepspeed is not None else 0
    if zero != 3 or not loads_universal(trainer.args):
        return []
    from transformers import TrainerCallback  # here: the module imports without the training stack

    class OwnSteps(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            torch_optimizer = innermost(kwargs.get("optimizer"))
            shared = unshare_steps(getattr(torch_optimizer, "state", {}))
            print(f"[checkpoint] universal load: {shared} Adam step count(s) shared with another "
                  "group given their own", flush=True)
            return control

    trainer.add_callback(OwnSteps())
    return []
