"""Reading a DeepSpeed checkpoint back with one copy instead of two (issue #29's restart).

Why: a 7B ZeRO-2 resume on 2 x H200 spent about 50 s reading its checkpoint back (rank 0's
start-up record: 62.9 s from the trainer built to train begin, against 13.0 s without a
checkpoint; docs/benchmarks.md, session 38), 49.5 GiB a rank, and that 50 s is what kept the
warm restart above half the cold one. DeepSpeed's checkpoint engine calls ``torch.load``, which
copies every tensor into newly allocated host memory before the optimizer copies it again to the
GPU. With ``mmap=True`` torch.load maps the file and the one copy left, to the GPU, reads the
page cache directly (DeepSpeed reads the module-states file twice: the second read is nearly free
mapped). Measured (``benchmarks/bench_checkpoint_read.py``, 2 x H200, session 38):
a 16 GiB partition to the GPU in 2.22 s against 11.55 s; a 1.5B ZeRO-2 resume's trainer built
to train begin 5.58 s against 16.53 s (12.7 GiB a rank), nothing left mapped after it; both from
the page cache. The 7B series with it (session 39): the read back fell from 49.9 to 7.6 s
warm (61.9 GiB mapped a rank), the warm restart from 113.2 to 74.3 s, and the resume still
equalled the uninterrupted run at every step. Cold, on this project's CPU machine's local disk,
mapped was still 2.70x as fast; a cold parallel file system (a requeue onto another node) is not
measured: page faults may read it slower than one whole read, and an I/O error during the copy
is a SIGBUS (the rank dies, and the attempt is retried as a crash) instead of an exception.

Where: only where every large loaded tensor is copied elsewhere: a run on GPUs under DeepSpeed
ZeRO 1-3 without optimizer offload (the module states go into the GPU parameters, the fp32
partitions and Adam's states into GPU tensors). With offload, or on CPUs, the optimizer keeps
host tensors as loaded (``.to`` a CPU tensor to the CPU is the same tensor), so the file would
stay mapped for the whole run and a checkpoint rotated away later would keep its disk space.
For the same reason tensors under SMALL_BYTES (step counters, scalars: kept as loaded on the
host even on GPUs) are copied out of the mapping at once. At train begin ``still_mapped``
lists what the process still maps of the checkpoint; the rank prints it (expected: nothing).
``HPC_GRPO_CHECKPOINT_MMAP=0`` turns it off (the benchmark's other half, and a way out).
"""

from __future__ import annotations

import gc
import os
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.context import HookContext

SMALL_BYTES = 1 << 20
ENV = "HPC_GRPO_CHECKPOINT_MMAP"


def wanted(run: RunRecord, env: Mapping[str, str]) -> bool:
    """Whether this run's checkpoint is read through mappings (see the module's docstring)."""
    ds = run.deepspeed
    return (env.get(ENV, "1") != "0" and run.device == "cuda" and ds is not None
            and ds.zero_stage > 0 and not ds.offload_optimizer)


def copy_small(obj: Any, small: int = SMALL_BYTES) -> Any:
    """``obj`` with every tensor under ``small`` bytes inside its dicts, lists and tuples
    replaced by a copy in ordinary memory (dicts and lists changed in place)."""
    import torch  # here: the module imports without torch

    if isinstance(obj, torch.Tensor):
        return obj.clone() if obj.numel() * obj.element_size() < small else obj
    if isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = copy_small(value, small)
    elif isinstance(obj, list):
        obj[:] = [copy_small(value, small) for value in obj]
    elif type(obj) is tuple:
        return tuple(copy_small(value, small) for value in obj)
    return obj


class MappedReads:
    """What the patched load read, for the rank's one line after it."""

    def __init__(self) -> None:
        self.mapped: list[int] = []  # bytes of each file read through a mapping
        self.copied: list[int] = []  # bytes of each file torch.load read the usual way
        self.failed: list[str] = []  # files whose mapping failed (then read whole)
        self.first: float | None = None  # when the first file's read began (time.monotonic)

    def line(self, now: float) -> str:
        """What was read; the seconds run from the first file's read to ``now`` (train begin):
        a mapped torch.load returns at once, the copies that read the file come after it."""
        failed = f"; not mapped: {'; '.join(self.failed)}" if self.failed else ""
        took = f", {now - self.first:.1f} s from the first file's read to train begin" \
            if self.first is not None else ""
        return (f"checkpoint read: {len(self.mapped)} file(s) mapped "
                f"({sum(self.mapped) / 2**30:.1f} GiB), {len(self.copied)} read whole "
                f"({sum(self.copied) / 2**30:.1f} GiB){took}{failed}")


def mapped_load(reads: MappedReads) -> Callable[..., Any]:
    """A ``TorchCheckpointEngine.load`` that maps zip-format files (torch.save's default, and
    DeepSpeed's ``checkpoint_serialization`` default); the legacy format is read as before."""
    import torch  # here: the module imports without torch

    def load(self: Any, path: str, map_location: Any = None) -> Any:
        if reads.first is None:
            reads.first = time.monotonic()
        size = os.path.getsize(path)
        loaded = None
        if zipfile.is_zipfile(path):
            try:
                loaded = copy_small(torch.load(path, map_location=map_location,
                                               weights_only=False, mmap=True))
                reads.mapped.append(size)
            except (OSError, RuntimeError) as exc:  # a file system that cannot map it
                reads.failed.append(f"{Path(path).name}: {exc}")
        if loaded is None:
            loaded = torch.load(path, map_location=map_location, weights_only=False)
            reads.copied.append(size)
        return loaded

    return load


def still_mapped(folder: Path, maps: Path = Path("/proc/self/maps")) -> list[str]:
    """Files under ``folder`` this process maps (after a garbage collection: the loaded dicts
    are gone by train begin unless something kept a tensor of them)."""
    gc.collect()
    prefix = str(folder.resolve())
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    fields = (line.split(None, 5) for line in lines)  # the sixth field is the mapped path
    paths = {f[5] for f in fields if len(f) == 6}
    return sorted(p for p in paths if p.startswith(prefix + os.sep))


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``read_through_mappings``; its line on a mapped resume."""
    line = read_through_mappings(trainer, ctx.run, ctx.resume, ctx.env)
    return [line] if line else []


def read_through_mappings(trainer: Any, run: RunRecord, resume: Path | None,
                          env: Mapping[str, str]) -> str | None:
    """On a resume this run reads through mappings: patch DeepSpeed's checkpoint engine for the
    read, and at train begin put it back and say what was read and what is still mapped."""
    if resume is None or not wanted(run, env):
        return None
    # here: the module imports without the training stack
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from transformers import TrainerCallback

    reads, folder = MappedReads(), resume
    original = TorchCheckpointEngine.load
    TorchCheckpointEngine.load = mapped_load(reads)  # type: ignore[method-assign]

    class MappedReadCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            TorchCheckpointEngine.load = original  # type: ignore[method-assign]
            print(f"[checkpoint] {reads.line(time.monotonic())}", flush=True)
            if left := still_mapped(folder):
                print(f"[checkpoint] still mapped after the read (their disk space stays in use "
                      f"until this attempt ends): {', '.join(left)}", flush=True)
            return control

    trainer.add_callback(MappedReadCallback())
    return f"the checkpoint is read through mappings ({ENV}=0 turns it off)"
