"""Periodic checkpoints written in the background while training goes on (``async_save: true``).

Why: a save stops every rank for its whole write. The 7B stop's save on 2 x H200 held training
90.5 s; the 72B plan writes about 25 GiB a rank. Most of that time is the output file system,
not the copy off the device: DeepSpeed's write ran at 1.0-1.3 GB/s a rank, torch.save into
memory at 2.1-2.8 GiB/s on this project's 2-core machine (``save_speed.py``).

How. During a periodic save (one after which training continues), the two calls that write the
checkpoint's bulk, ``Trainer.save_model`` (weights, LoRA's adapter) and
``_save_optimizer_and_scheduler`` (DeepSpeed's partitions, ``optimizer.pt``), run with
``torch.save`` and safetensors' ``save_file`` turned into: serialize into host memory now (the
state as it is at this step; device tensors reach the host as in a synchronous save, through
pinned blocks where ``pinned_save.py`` allows), then hand the bytes to this rank's writer
thread, which writes and fsyncs the file while the next steps train. The files hold what a
synchronous save writes (torch.save's archive is named after the file or "archive", which
``torch.load`` does not read), so a resume from them is as exact.
Files under ``MIN_DEFERRED_BYTES`` (config, tokenizer, a placeholder that the save itself
removes: ``deepspeed_save.py``) and everything else the save writes (RNG states, trainer state,
the generation buffer, whose writer renames its file) are written at once, as always.

What makes it complete. The writer fsyncs every file of the folder (those written at once too)
and the folder; the checkpoint marker callback (``marker.CheckpointMarkerCallback``) asks at
each step's end, on every rank (one all-reduce of a byte), whether all ranks' writes are
durable, and only then rank 0 writes the completion marker and applies retention. Until then
the previous complete checkpoint is the one a restart resumes from (a crash or a killed node
during the write leaves it so), and retention, which runs only after a marker, has not
removed it. The next periodic save and the end of training first wait for the write in flight
and mark it (``settle``): at most one background write at a time. A stop's save (the time
limit's lead, a preemption, USR2) and the last step's save give it up instead (``abandon``:
the file being written finishes, the rest are dropped, nothing is marked) and write every file
anew, at once: a stop then needs one save's time of warning, not the rest of the write in
flight plus its own (the plan's lead rule, planner/timing.py, is unchanged by async_save).

Host memory. The bytes wait in host memory until written. A save hands at most
``CHECKPOINT_HOST_FRACTION`` (pinned_save's share too) of the memory available to the job, split over the
node's ranks, to the writer; a file past it is written at once, said once in the rank log.

Why not the anchors' own. PyTorch's distributed checkpoint ``async_save`` writes DCP's format,
which transformers' Trainer (and so TRL) neither writes nor resumes from. DeepSpeed's
``DecoupledCheckpointEngine`` (0.17+) writes through ``FastCheckpointEngine``, which needs the
async_io op compiled (libaio on every node; the CPU install builds no op), and covers
DeepSpeed's files only: not a run without ZeRO, LoRA's adapter, or transformers' own files.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import CHECKPOINT_HOST_FRACTION
from hpc_grpo.runtime.rank.checkpoints.prefetch import cacheable_bytes
from hpc_grpo.runtime.rank.context import HookContext

MIN_DEFERRED_BYTES = 4 << 10
# the trainer's calls that write a checkpoint's bulk (transformers 5.x Trainer._save_checkpoint)
BULK_CALLS = ("save_model", "_save_optimizer_and_scheduler")
# packages whose modules may hold their own binding of torch.save or safetensors' save_file
# (transformers.modeling_utils and peft.peft_model import save_file under another name)
_BINDING_PACKAGES = ("torch", "safetensors", "transformers", "peft", "trl", "deepspeed",
                     "accelerate")


@dataclass
class Batch:
    """One checkpoint's background write on this rank."""

    step: int
    folder: Path
    step_end: float  # time.time() of the step's end the save followed
    budget: int  # bytes the writer may hold for it
    held_bytes: int = 0
    files: int = 0
    written_now: int = 0  # files over the budget, written at once
    held_s: float = 0.0  # training time the save took, settled at the marker callback's on_save
    error: str = ""
    abandoned: bool = False  # a stop's save supersedes it: drop what is not written yet
    done: threading.Event = field(default_factory=threading.Event)


class Writer:
    """This rank's writer thread and the one batch in flight (a save waits for the last)."""

    def __init__(self, budget: Callable[[], int]) -> None:
        self.budget = budget
        self.delay_s = 0.0  # each file's write starts this much later (faults/slow_writes.py)
        self.batch: Batch | None = None
        self.said_over_budget = False
        self._queue: queue.Queue[tuple[Batch, Path | None, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def begin(self, step: int, folder: Path, step_end: float) -> Batch:
        """A new batch; the previous one must be done (``settle`` before a save)."""
        if self.batch is not None and not self.batch.done.is_set():
            raise RuntimeError(f"checkpoint-{self.batch.step}'s background write is in flight")
        self.batch = Batch(step, folder, step_end, self.budget())
        return self.batch

    def hand(self, path: Path, data: io.BytesIO, write_now: Callable[[], None]) -> None:
        """``data`` (a whole file) to the writer, or written at once past the batch's budget."""
        batch = self.batch
        size = data.getbuffer().nbytes
        if batch is None or size < MIN_DEFERRED_BYTES:
            write_now()
            return
        if batch.held_bytes + size > batch.budget:
            batch.written_now += 1
            if not self.said_over_budget:
                self.said_over_budget = True
                print(f"[checkpoint] {path.name} ({size / 2**30:.2f} GiB) written at once: the "
                      f"background writer holds at most {batch.budget / 2**30:.2f} GiB on this "
                      "rank (half the memory available to the job, over the node's ranks)",
                      flush=True)
            write_now()
            return
        batch.held_bytes += size
        batch.files += 1
        self._start()
        self._queue.put((batch, path, data))

    def seal(self) -> None:
        """Every file of the batch handed over: fsync the folder's files once written."""
        if self.batch is None:
            return
        self._start()
        self._queue.put((self.batch, None, None))

    def abandon(self) -> None:
        """Give the batch in flight up: the file being written finishes, the rest are dropped,
        the seal fsyncs nothing; returns once the writer is idle."""
        batch = self.batch
        if batch is None or batch.done.is_set():
            return
        batch.abandoned = True
        batch.done.wait()

    def wait(self) -> Batch | None:
        """Block until the batch in flight is durable (or failed); returns it."""
        batch = self.batch
        if batch is not None:
            batch.done.wait()
        return batch

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="checkpoint-writer",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            batch, path, data = self._queue.get()
            if path is None:  # the seal
                if not batch.error and not batch.abandoned:
                    batch.error = _fsync_tree(batch.folder)
                batch.done.set()
                continue
            if batch.error or batch.abandoned:
                data.close()
                continue  # failed or given up: its other files are not worth writing
            try:
                if self.delay_s:
                    time.sleep(self.delay_s)
                _write(path, data)  # made durable with the rest of the folder at the seal
            except OSError as exc:
                batch.error = f"{path}: {exc.strerror or exc}"
            finally:
                data.close()  # the bytes go back as soon as they are on disk


def _fsync_tree(folder: Path) -> str:
    """fsync every file under ``folder`` (the writer's and those the save wrote at once), then
    every folder, deepest first, so each entry is durable before the folder naming it; "" or
    the first failure."""
    try:
        found = sorted(folder.rglob("*"))
        for item in [p for p in found if p.is_file()] + \
                [p for p in reversed(found) if p.is_dir()] + [folder]:
            fd = os.open(item, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        return f"{folder}: {exc.strerror or exc}"
    return ""


_FOUND: dict[tuple[int, tuple[int, ...]], list[tuple[Any, str, Any]]] = {}


def _bindings(targets: tuple[Any, ...]) -> list[tuple[Any, str, Any]]:
    """(module, name, function) for every loaded module of ``_BINDING_PACKAGES`` that binds one
    of ``targets`` under any name: the ones to swap for a save. The scan (about 20 ms over a
    rank's 3,300 modules) is kept until another module is loaded."""
    key = (len(sys.modules), tuple(id(t) for t in targets))
    if key not in _FOUND:
        _FOUND.clear()
        _FOUND[key] = _scan(targets)
    return _FOUND[key]


def _scan(targets: tuple[Any, ...]) -> list[tuple[Any, str, Any]]:
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in _BINDING_PACKAGES:
            continue
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict):
            continue
        found += [(module, attr, value) for attr, value in list(space.items())
                  if any(value is t for t in targets)]
    return found


@contextlib.contextmanager
def deferred_writes(writer: Writer) -> Iterator[None]:
    """Within: ``torch.save`` to a path and safetensors' ``save_file`` serialize into memory and
    hand the bytes to ``writer``; to a file object (or small), they write as before."""
    import safetensors.torch  # here: the module imports without torch
    import torch  # here: the module imports without torch

    torch_save, save_file = torch.save, safetensors.torch.save_file

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(f, (str, os.PathLike)):
            torch_save(obj, f, *args, **kwargs)
            return
        data = io.BytesIO()
        torch_save(obj, data, *args, **kwargs)
        writer.hand(Path(f), data, lambda: _write(Path(f), data))

    def safe_save(tensors: Any, filename: Any, metadata: Any = None) -> None:
        data = io.BytesIO(safetensors.torch.save(tensors, metadata=metadata))
        writer.hand(Path(filename), data, lambda: _write(Path(filename), data))

    swapped = _bindings((torch_save, save_file))
    for module, attr, value in swapped:
        setattr(module, attr, save if value is torch_save else safe_save)
    try:
        yield
    finally:
        for module, attr, value in swapped:
            setattr(module, attr, value)


def _write(path: Path, data: io.BytesIO) -> None:
    with open(path, "wb") as out:
        out.write(data.getbuffer())


def periodic(trainer: Any) -> bool:
    """A save after which training goes on: not the last step's, not a stop's."""
    state, control = trainer.state, getattr(trainer, "control", None)
    stopping = bool(getattr(control, "should_training_stop", False))
    return not stopping and not (state.max_steps > 0 and state.global_step >= state.max_steps)


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``write_in_background`` where the run asks for it; its line."""
    if not ctx.run.async_save or ctx.marker is None:
        return []
    ranks = max(ctx.run.procs_per_node, 1)
    writer = Writer(lambda: int(CHECKPOINT_HOST_FRACTION * cacheable_bytes() / ranks))
    write_in_background(trainer, ctx.marker, writer)
    return ["periodic checkpoints are written in the background while training goes on "
            "(async_save); the completion marker follows once every rank's files are durable"]


def write_in_background(trainer: Any, marker: Any, writer: Writer) -> None:
    """Wrap ``trainer._save_checkpoint``: the write in flight settled first, then a periodic
    save's bulk calls deferred to ``writer``; ``marker`` (the checkpoint marker callback) seals
    the batch at its ``on_save`` and marks it once durable everywhere."""
    marker.background = writer
    original = trainer._save_checkpoint
    bulk = [(name, getattr(trainer, name)) for name in BULK_CALLS
            if callable(getattr(trainer, name, None))]

    def deferring(call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if not deferring_now[0]:
                return call(*args, **kwargs)
            with deferred_writes(writer):
                return call(*args, **kwargs)
        return run

    deferring_now = [False]
    for name, call in bulk:
        setattr(trainer, name, deferring(call))

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        if not periodic(trainer):  # a stop's or the last step's: written at once, in full
            marker.abandon()  # the write in flight given up, on every rank
            return original(*args, **kwargs)
        marker.settle()  # the write in flight: durable and marked first, on every rank
        folder = Path(str(trainer.args.output_dir)) / f"checkpoint-{trainer.state.global_step}"
        writer.begin(trainer.state.global_step, folder, marker.step_end)
        deferring_now[0] = True
        try:
            return original(*args, **kwargs)
        finally:
            deferring_now[0] = False

    trainer._save_checkpoint = save_checkpoint
