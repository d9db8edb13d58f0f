"""The completion marker that makes a checkpoint eligible for resume, and retention after it.

Imported only by the ranks (it imports torch and transformers). A trainer callback, apart from
the other callbacks (callbacks.py) because a save written in the background (``async_save``,
background_save.py) is marked later than it is saved.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hpc_grpo import rundir
from hpc_grpo.rundir import ledgers
from hpc_grpo.runtime.rank.callbacks import dist_ready
from hpc_grpo.runtime.rank.checkpoints import folders, save_parts

# Fault injection for tests: a file of this name in the run directory holds the next save open
# (files written, completion marker not yet) for that many seconds, once.
FAULT_SAVE_DELAY = "fault-save-delay"


class CheckpointMarkerCallback(TrainerCallback):
    """After a save, wait for every rank, then rank 0 marks the checkpoint complete and only then
    deletes what retention lets go (folders.retain: the folders of killed saves, the oldest
    complete checkpoints beyond ``keep``); GRPOConfig's own rotation is off (grpo_args.py).

    A periodic save written in the background (``background``: background_save.Writer, set by
    its hook where the run asks for ``async_save``) is marked later: at the first step end where
    every rank's files are durable, or when ``settle`` waits for it (before the next save, a
    stop's save, the end of training)."""

    def __init__(self, run_dir: Path, keep: int | None = None,
                 device: torch.device | None = None) -> None:
        self.run_dir = run_dir
        self.keep = keep
        self.device = device or torch.device("cpu")
        self.step_end = time.time()
        self.clock = save_parts.SaveClock()  # the save's parts (save_parts.time_saves times them)
        self.saved_step: int | None = None  # the step of this attempt's newest save
        self.background: Any = None  # background_save.Writer where the run saves asynchronously
        self.pending: Any = None  # its Batch between the save's on_save and the marker
        self.pending_parts: dict[str, float] = {}  # the split of the time that save held
        self.best: str | None = None  # the trainer's best checkpoint, which retention keeps

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        """No second save of a step already saved. ``save_strategy: epoch`` asks for a save at
        every epoch end; where that epoch's last step was saved at its step end (the last step
        of the run, or a stop), transformers would write checkpoint-N again into the folder
        already marked complete, and a kill during that rewrite would leave a marked folder
        half old, half new. Runs after transformers' DefaultFlowCallback and before the disk
        check, on every rank alike (the same steps were saved on all)."""
        if control.should_save and self.saved_step == state.global_step:
            control.should_save = False
            print(f"[checkpoint] epoch end at step {state.global_step}: checkpoint-"
                  f"{state.global_step} was saved at the step's end, not saved twice", flush=True)
        return control

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        self.step_end = time.time()  # the save, if any, starts right after this
        self.clock.step_ended()
        if self.pending is not None:
            self._settle_background(wait=False)
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        self.settle()  # a run that ends without a last save still marks the one in flight
        return control

    def settle(self) -> None:
        """Wait for the background write in flight, on every rank, and mark it (collective:
        every rank calls it at the same point, before a periodic save or at the end of
        training)."""
        if self.pending is not None:
            self._settle_background(wait=True)

    def abandon(self) -> None:
        """Before a stop's save or the last step's (collective, as ``settle``): the write in
        flight is given up after the file being written, never marked, and removed with the
        other unmarked folders once the save that supersedes it is marked (folders.retain).
        That save writes every file anew: finishing the old write first would make a stop need
        up to two saves' time of warning instead of one (planner/save_time.py's lead)."""
        batch = self.pending
        if batch is None:
            return
        self._writers_idle()
        self.pending = None
        print(f"[checkpoint] {batch.folder.name} given up ({batch.files} file(s) were being "
              "written in the background): this save writes every file anew", flush=True)

    def _writers_idle(self) -> None:
        """Every rank's writer drops what it has not written yet and goes idle (collective)."""
        self.background.abandon()
        if dist_ready():
            dist.barrier()

    def _settle_background(self, wait: bool) -> None:
        """Mark the pending checkpoint once every rank's files are durable: an all-reduce (MIN)
        of each rank's answer, 1 durable, 0 still writing, -1 failed."""
        batch = self.pending
        if wait:
            self.background.wait()
        local = (-1 if batch.error else 1) if batch.done.is_set() else 0
        answer = torch.tensor([local], dtype=torch.int32, device=self.device)
        if dist_ready():
            dist.all_reduce(answer, op=dist.ReduceOp.MIN)
        verdict = int(answer.item())
        if verdict == 0:
            return  # some rank still writes: asked again at the next step's end
        self.pending = None
        if verdict < 0:
            self._failed(batch)
            return
        self._mark(batch.folder, batch.step, batch.step_end, held_s=batch.held_s,
                   parts={**self.pending_parts, **batch_parts(batch)}, quiet=True)
        print(f"[checkpoint] {batch.folder.name} complete: {batch.files} file(s), "
              f"{_size(batch.held_bytes)} written in the background, "
              f"{time.time() - batch.step_end:.2f} s after its step (training held "
              f"{batch.held_s:.2f} s)", flush=True)

    def _failed(self, batch: Any) -> None:
        """A background write failed on some rank (a full disk, a quota): every rank's writer
        stops, then rank 0 removes the folder, whose files would otherwise hold the space the
        next save needs (the free-space check skips saves until there is room)."""
        self._writers_idle()
        why = batch.error or "another rank's write failed"
        line = (f"checkpoint-{batch.step} not completed: its background write failed ({why}); "
                "the newest complete checkpoint stays the one a restart resumes from")
        print(f"[checkpoint] {line}", flush=True)
        if self.is_lead:
            shutil.rmtree(batch.folder, ignore_errors=True)
            rundir.update_state(self.run_dir, checkpoint_skipped=line)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        self.best = state.best_model_checkpoint
        fault = self.run_dir / FAULT_SAVE_DELAY
        if state.is_world_process_zero and fault.exists():  # tests: a window to kill mid-save
            delay = float(fault.read_text() or 0)
            fault.unlink()
            (self.run_dir / "fault-saving").write_text(str(state.global_step))
            time.sleep(delay)
        folder = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        self.saved_step = state.global_step
        batch = self.background.batch if self.background is not None else None
        if batch is not None and batch.step == state.global_step and not batch.done.is_set() \
                and self.pending is None:
            batch.held_s = time.time() - self.step_end
            self.background.seal()
            self.pending, self.pending_parts = batch, self.clock.rounded()
            print(f"[checkpoint] {folder.name}: training goes on while {batch.files} file(s), "
                  f"{_size(batch.held_bytes)}, are written in the background "
                  f"({batch.held_s:.2f} s held)", flush=True)
            self.clock.step_ended()
            return control
        waiting = time.perf_counter()
        if dist_ready():
            dist.barrier()
        self.clock.add("wait_for_ranks", time.perf_counter() - waiting)
        self._mark(folder, state.global_step, self.step_end)
        return control

    @property
    def is_lead(self) -> bool:
        """Rank 0: the marker's, retention's and state.json's single writer."""
        return not dist_ready() or dist.get_rank() == 0

    def _mark(self, folder: Path, step: int, step_end: float, held_s: float | None = None,
              parts: dict[str, float] | None = None, quiet: bool = False) -> None:
        """Rank 0: the completion marker, retention, state.json; every rank: the save's line."""
        marking = time.perf_counter()
        if self.is_lead:
            world = dist.get_world_size() if dist_ready() else 1
            folders.write_marker(folder, step, world)
            best = Path(self.best) if self.best else None
            for gone in folders.retain(folder.parent, self.keep, best):
                print(f"[checkpoint] removed {gone.name} (save_total_limit {self.keep})", flush=True)
        self.clock.add("marker_and_retention", time.perf_counter() - marking)
        parts = parts or self.clock.rounded()
        self.clock.step_ended()  # a later save at this step (none since on_epoch_end) starts anew
        if not quiet:
            print(f"[checkpoint] {save_parts.line(folder.name, parts)}", flush=True)
        if self.is_lead:
            seconds = round(time.time() - step_end, 3)
            rundir.update_state(
                self.run_dir,
                last_checkpoint_step=step,
                last_checkpoint_time=time.time(),
                last_checkpoint=str(folder),
                checkpoint_seconds=seconds,  # the step's end to marked complete
                checkpoint_held_s=seconds if held_s is None else round(held_s, 3),
                checkpoint_parts_s=parts,  # rank 0's split of it (save_parts.py)
                checkpoint_skipped=None,  # this save completed: no skip stands
            )
            ledgers.append_save(self.run_dir, step=step, seconds=seconds,  # each save's time
                                held_s=None if held_s is None else round(held_s, 3))


def _size(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


def batch_parts(batch: Any) -> dict[str, float]:
    """A background save's own part for the save's split: the write after training went on."""
    return {"background_write": round(max(time.time() - batch.step_end - batch.held_s, 0.0), 3)}
