"""Each rank's heartbeat (``heartbeats/rank-N.json``) and its stack on demand, for the watchdog.

The node task's watchdog (runtime/node/watchdog.py) cannot see inside a rank: it reads these
files. A rank rewrites its own at every sign of progress, from the training thread itself, so
a blocked rank's file stops changing: when the trainer starts, when one of TRL's profiled blocks
finishes (generation, each reward function, the loss; where a blocked rank stopped inside a
step), when a step ends (its duration feeds the bound) and when a save ends. A few small atomic
writes a step; GRPO steps take seconds. A write that fails is reported once and skipped: the
watchdog judges the run by its most recent progress on any rank, so one silent rank is no stall.

``start`` registers ``faulthandler`` on SIGQUIT (``DUMP_SIGNAL``, runtime/shared/signals.py):
the watchdog sends it to every rank before ending the attempt, and each rank's Python stack
(all threads) goes to its own log, written by the C-level handler even while the rank is
blocked in a collective or a sleep.

Stdlib only at import: ``start`` runs before torch is imported.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import HEARTBEATS
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.shared.signals import DUMP_SIGNAL

WINDOW = 20  # the bound follows the slowest of this many recent steps
# TRL's generation blocks: "transformers.generate", "transformers.generate_batch", "vLLM.generate"
GENERATE_BLOCK_SUFFIXES = ("generate", "generate_batch")


class Heartbeat:
    """One rank's heartbeat file; every method writes it at once."""

    def __init__(self, run_dir: Path, rank: int, attempt: str) -> None:
        self.path = Path(run_dir) / HEARTBEATS / f"rank-{rank}.json"
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.step_start: float | None = None
        self.failed = False
        self.record: dict[str, Any] = {
            "rank": rank, "attempt": attempt, "pid": os.getpid(), "host": socket.gethostname(),
            "phase": "setup", "step": -1, "steps_done": 0, "mark": 0, "block": "",
            "time": time.time(), "step_s": None, "slowest_s": None}
        self.held = 0  # steps whose times are no reference yet (hold_reference)
        self.generated = False  # a generation block finished in the current step

    def hold_reference(self, steps: int) -> None:
        """Report no step time until a step that generates has ended (at most ``steps`` steps):
        a resume that restored a generation buffer trains its first steps without generating,
        and a bound from those alone would call the first generation a stall."""
        self.held = max(0, steps)

    def _write(self, **fields: Any) -> None:
        self.record.update(fields, time=time.time())
        try:
            rundir.write_json_atomic(self.path, self.record)
        except OSError as err:
            if not self.failed:
                print(f"[heartbeat] cannot write {self.path}: {err}", flush=True)
            self.failed = True

    def train_begin(self, step: int) -> None:
        self.step_start = time.time()
        self._write(phase="training", step=step, mark=0, block="")

    def mark(self, block: str) -> None:
        """One of TRL's blocks finished inside the current step."""
        self.generated = self.generated or block.endswith(GENERATE_BLOCK_SUFFIXES)
        self._write(mark=int(self.record["mark"]) + 1, block=block)

    def step_end(self, step: int, saving: bool) -> None:
        now = time.time()
        took = now - self.step_start if self.step_start is not None else None
        if took is not None:
            self.recent.append(took)
        self.step_start = now
        self.held = 0 if self.generated else max(0, self.held - 1)
        self.generated = False
        slowest = round(max(self.recent), 3) if self.recent and not self.held else None
        self._write(phase="saving" if saving else "training", step=step,
                    steps_done=int(self.record["steps_done"]) + 1, mark=0, block="",
                    step_s=None if took is None else round(took, 3), slowest_s=slowest)

    def saving(self) -> None:
        """A save that starts outside a step end (an epoch end)."""
        self._write(phase="saving")

    def saved(self) -> None:
        self.step_start = time.time()  # the next step's time starts after the save
        self._write(phase="training")

    def ending(self) -> None:
        self._write(phase="ending")


BEAT: Heartbeat | None = None  # this process's heartbeat: a rank runs one trainer


def start(run_dir: Path, rank: int, attempt: str) -> Heartbeat:
    """Register the stack dump and write the first heartbeat (phase ``setup``). Call after the
    rank's output went to its log: faulthandler keeps the descriptor it is given."""
    global BEAT
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    BEAT = Heartbeat(run_dir, rank, attempt)
    BEAT._write()
    return BEAT


def _hook_blocks(profiling: Any, beat: Heartbeat) -> None:
    """Mark the end of each TRL profiled block (chained onto whatever ``_log_metrics`` is now,
    e.g. runtime/rank/observe/phases.py's; idempotent)."""
    context = getattr(profiling, "ProfilingContext", None)
    original = getattr(context, "_log_metrics", None)
    if context is None or original is None or getattr(original, "_hpc_grpo_beat", False):
        return

    def _log_metrics(self: Any, duration: float) -> None:
        original(self, duration)
        if BEAT is not None:
            BEAT.mark(str(getattr(self, "name", "")).split(".", 1)[-1])

    _log_metrics._hpc_grpo_beat = True  # type: ignore[attr-defined]
    context._log_metrics = _log_metrics


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``watch``, silent."""
    watch(trainer)
    return []


def watch(trainer: Any) -> None:
    """Add the heartbeat callback to the trainer (last: it sees the final ``should_save``) and
    mark TRL's blocks. Nothing when ``start`` was not called."""
    from transformers import TrainerCallback  # here: the module imports without the training stack
    from trl.extras import profiling  # here: the module imports without the training stack

    if BEAT is None:
        return
    beat: Heartbeat = BEAT

    class HeartbeatCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            beat.train_begin(int(state.global_step))
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            beat.step_end(int(state.global_step), bool(control.should_save))
            return control

        def on_epoch_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            # save_strategy epoch decides here (after the marker's dedupe and the disk check):
            # the stall watchdog's limit then allows for the save
            if control.should_save:
                beat.saving()
            return control

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            beat.saved()
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            beat.ending()
            return control

    _hook_blocks(profiling, beat)
    trainer.add_callback(HeartbeatCallback())
