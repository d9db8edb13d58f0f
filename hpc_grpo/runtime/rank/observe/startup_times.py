"""Where an attempt's time goes before its first step: rank 0 appends one ``startup.jsonl`` line
per attempt when its first step ends.

Why: a restart's cost (signal to first new step) has a goal (issue #30: at most 60 s warm on the
two-node GPU sandbox, measured 77.8 s on 2 x H100). Slurm's accounting says when the stopped
attempt ended and the new one was allocated (``sacct -D``); this says what the ranks spend after
that, in order:

* ``imports``: the rank process's start (the kernel's, /proc/self/stat) to the rank's ``main``
  (Python and the runtime's own modules; torch is not imported yet);
* ``torch_and_group``: to the process group: torch imported, the CUDA device set, DeepSpeed
  imported where the run uses it, then every rank of every node arrived;
* ``trainer``: to the trainer built (model loaded, vLLM engine started, checks, resume record);
  ``trainer_parts_s`` splits out the calls timed inside it: ``model_load`` (TRL's
  ``create_model_from_path``: the policy, and the reference model where beta > 0) and TRL's
  ``VLLMGeneration._init_vllm`` as ``engine_start`` (colocate: the engine, its compile and CUDA
  graphs) or ``server_connect`` (server mode: rank 0's client and weight-sync group). Both end
  in TRL's barrier, so rank 0's figure includes waiting for the slowest rank. Three stretches
  of the part are timed as well: ``checks_and_inputs`` (GRPOConfig, the rank and hardware
  checks, rewards, dataset and tokenizer), ``trainer_import`` (TRL's trainer module, which
  imports vLLM) and ``heap_freeze`` (rank/setup/startup_heap.py: one full collection, then
  ``gc.freeze``; counted in ``trainer_import`` through session 43's GPU runs), and, since
  session 45 (where 4.55 s of the sandbox restart's 21.6 s trainer part had no name), three
  that complete the split: ``runtime_imports`` (the rank's modules for its checks, transformers'
  trainer utilities among them), ``trainer_init_other`` (GRPOTrainer's construction outside
  the timed calls) and ``resume_and_hooks`` (trackers, the resume's pick and record, the
  prefetch's start, the rank's callbacks and hooks). Why: at 7B the
  trainer part is the warm restart's largest (session 39), and in session 40 about 18 of its
  40 s were outside the two timed calls; the split says what to shorten;
* ``prepare_and_load``: to the Trainer's ``on_train_begin`` (accelerate/DeepSpeed wrapping and,
  on a resume, the checkpoint read back: transformers calls it after both); ``prepare_parts_s``
  splits it: ``accelerate_prepare`` (accelerate's ``prepare``: DeepSpeed's engine and optimizer,
  or the DDP wrap), and on a resume ``deepspeed_checkpoint_load`` (transformers'
  ``deepspeed_load_checkpoint``) or ``model_checkpoint_load`` and ``optimizer_load``
  (``Trainer._load_from_checkpoint``, ``_load_optimizer_and_scheduler``). Why: this part was
  the warm 7B restart's second largest (23.05 s of 68.65, session 40);
* ``first_step``: to the end of the first optimizer step of this attempt.

Wall-clock seconds of rank 0 only; another rank's parts differ by its own waits.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.startup import PART_NAMES
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.observe.phases import engine_class

PARTS = tuple(PART_NAMES)  # the order the marks are taken in


def process_start_time(fallback: float) -> float:
    """The epoch second the kernel started this process (Linux), else ``fallback``. The boot
    time comes from CLOCK_BOOTTIME, not /proc/stat's btime (whole seconds: up to 1 s early)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of the whole line: starttime, clock ticks after boot
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return fallback


class StartupClock:
    """Marks taken in order on rank 0; ``line`` turns them into the parts above."""

    def __init__(self, main_started: float) -> None:
        self.marks: list[float] = [process_start_time(main_started), main_started]
        self.within: dict[str, float] = {}  # trainer_parts_s, filled by timed_calls
        self.preparing: dict[str, float] = {}  # prepare_parts_s, the same way

    def mark(self) -> None:
        self.marks.append(time.time())

    def line(self, attempt: str, resumed_from_step: int | None) -> dict[str, Any]:
        parts = {name: round(b - a, 2) for name, a, b in
                 zip(PARTS, self.marks, self.marks[1:], strict=False)}
        within = {key: round(value, 2) for key, value in self.within.items()}
        preparing = {key: round(value, 2) for key, value in self.preparing.items()}
        return {"attempt": attempt, "process_start": round(self.marks[0], 3),
                "resumed_from_step": resumed_from_step, "parts_s": parts,
                **({"trainer_parts_s": within} if within else {}),
                **({"prepare_parts_s": preparing} if preparing else {}),
                "total_s": round(self.marks[-1] - self.marks[0], 2)}


def trainer_targets(vllm_mode: str) -> dict[str, tuple[Any, str]]:
    """What ``timed_calls`` wraps while the trainer is built, by TRAINER_PART_NAMES key: TRL's
    module-level model loader (as grpo_trainer.py looks it up) and its vLLM set-up, named for
    what it does in ``vllm_mode``."""
    import trl.trainer.grpo_trainer as grpo  # here: the module imports without the training stack

    vllm = "server_connect" if vllm_mode == "server" else "engine_start"
    return {"model_load": (grpo, "create_model_from_path"), vllm: (engine_class(), "_init_vllm")}


def prepare_targets() -> dict[str, tuple[Any, str]]:
    """What ``timed_calls`` wraps while ``train()`` prepares, by PREPARE_PART_NAMES key:
    accelerate's ``Accelerator.prepare`` and the checkpoint loads as transformers' trainer.py
    looks them up (its module-level ``deepspeed_load_checkpoint``, its own methods)."""
    import transformers.trainer as trainer_module  # here: the module imports without the training stack
    from accelerate import Accelerator  # here: the module imports without the training stack

    return {"accelerate_prepare": (Accelerator, "prepare"),
            "deepspeed_checkpoint_load": (trainer_module, "deepspeed_load_checkpoint"),
            "model_checkpoint_load": (trainer_module.Trainer, "_load_from_checkpoint"),
            "optimizer_load": (trainer_module.Trainer, "_load_optimizer_and_scheduler")}


@contextlib.contextmanager
def timed_calls(within: dict[str, float],
                targets: Mapping[str, tuple[Any, str]]) -> Iterator[None]:
    """Inside the block, each ``(owner, attribute)`` is wrapped so every call's wall time adds
    to ``within[key]``; the originals are put back when it ends, also on an exception. Timing
    only: arguments, results and exceptions pass through. A target this TRL lacks (renamed,
    moved), or one that is a static or class method (a plain wrapper would bind it wrongly), is
    left alone: no split for it."""
    originals: list[tuple[Any, str, Any]] = []
    for key, (owner, attribute) in targets.items():
        raw = vars(owner).get(attribute) if owner is not None else None
        if callable(raw) and not isinstance(raw, staticmethod | classmethod):
            originals.append((owner, attribute, raw))
            setattr(owner, attribute, timed(raw, within, key))
    try:
        yield
    finally:
        for owner, attribute, raw in reversed(originals):
            setattr(owner, attribute, raw)


def timed(call: Callable[..., Any], within: dict[str, float], key: str) -> Callable[..., Any]:
    """``call``, with the wall time of each call (also one that raises) added to ``within[key]``."""

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            within[key] = within.get(key, 0.0) + time.perf_counter() - began
    return wrapper


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """Rank 0: mark train begin and the first step's end, then write the line once."""
    if not ctx.lead:
        return []
    clock: StartupClock = ctx.clock
    run_dir, attempt = ctx.run_dir, ctx.attempt
    resumed_from_step = ctx.resume_step if ctx.resume else None
    nodes = ctx.run.nodes  # this attempt's (rundir/reshard.record_at), status names it
    from transformers import TrainerCallback  # here: the module imports without the training stack

    class StartupCallback(TrainerCallback):  # type: ignore[misc]
        written = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            clock.mark()
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if not self.written:
                self.written = True
                clock.mark()
                try:  # a record of timing never ends a run (a full disk has its own handling)
                    rundir.append_jsonl(run_dir / contract.STARTUP_JSONL,  # min_nodes: its nodes
                                        {**clock.line(attempt, resumed_from_step), "nodes": nodes})
                except OSError as exc:
                    print(f"[train] startup.jsonl not written: {exc}", flush=True)
            return control

    trainer.add_callback(StartupCallback())
    return []
