"""Reading this rank's share of a DeepSpeed checkpoint into the page cache while the trainer is
built, so the resume's read finds it there (issue #30: "overlap engine start and checkpoint
load").

Why: a resume reads the checkpoint only after the model is loaded, the vLLM engine started and
DeepSpeed initialised (transformers loads it in ``train()``). At 7B on 2 x H200 the trainer part
alone took 40.75 s of a warm resume (rank 0's start-up record, session 39), and the read then
went through 61.9 GiB a rank (the module states twice, then the rank's optimizer partition):
7.6 s from a warm page cache (read.py's mappings). A requeue onto another node meets
a cold page cache, where those bytes come from the file system at its read speed (not measured
on the GPU machines). Reading them during the wait takes that time off the restart wherever
the reading ends before the load begins; where it does not, the load finds part of it cached.

What: the files DeepSpeed's ``load_checkpoint`` reads for this rank, in its order: the module
states (one file all ranks share under ZeRO 1-2, read by one rank per node; a file per rank under
ZeRO-3), then the rank's own optimizer partition; not ``model.safetensors`` (transformers does
not read it on a DeepSpeed resume) nor other ranks' partitions. Read by a daemon thread in 16 MiB
``preadv`` calls (the GIL is released while the kernel reads), stopped at train begin, when the
read is over. Bounded: at most half of the memory the node can cache (MemAvailable, lowered to
the room under the job's memory cgroups, v1 or v2) shared by its ranks; a larger share would
evict its own start. Page cache is reclaimable: with optimizer offload the kernel drops it
before the offload's host buffers run short.
Chunks already in the page cache (the node wrote the checkpoint, or ran the attempt before) are
not copied again: ``mincore(2)`` on a read-only mapping of the file says which pages are there,
as ``fincore`` and ``vmtouch`` ask it (Python has no binding; ctypes calls libc). Otherwise a
warm requeue would copy a 7B rank's 50 GiB through the buffer for nothing while the trainer loads.
Not measured on a GPU node or a parallel file system yet; measured on this project's CPU machine
with a cold page cache (docs/benchmarks.md, session 39). ``HPC_GRPO_CHECKPOINT_PREFETCH=0`` turns
it off.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.context import HookContext

ENV = "HPC_GRPO_CHECKPOINT_PREFETCH"
CHUNK = 16 << 20
SHARED_STATES = "mp_rank_00_model_states.pt"


def wanted(run: RunRecord, env: Mapping[str, str]) -> bool:
    """A DeepSpeed run (any device, any offload: all of them read the checkpoint after the
    trainer is built), unless switched off."""
    return env.get(ENV, "1") != "0" and run.deepspeed is not None


def rank_files(names: Sequence[str], rank: int, first_on_node: bool) -> list[str]:
    """Of a DeepSpeed tag folder's file names, those this rank prefetches, in load order:
    module states (the shared file only by the node's first rank), then its optimizer states."""
    own = re.compile(rf"(^|_)zero_pp_rank_{rank}_mp_rank_\d+_")
    states = [n for n in names if n.endswith("model_states.pt")
              and ((n == SHARED_STATES and first_on_node) or own.search(n))]
    optimizer = [n for n in names if n.endswith("optim_states.pt") and own.search(n)]
    return sorted(states) + sorted(optimizer)


def within_budget(sizes: Sequence[int], cacheable: int, ranks_on_node: int) -> list[int]:
    """The indices of the files (in load order) this rank's share holds: half of what the node
    can cache, split over its ranks; ``sizes`` are what each file would add to the page cache
    (its pages not cached yet); a file that does not fit is passed over, not the rest."""
    left, kept = cacheable // (2 * max(ranks_on_node, 1)), []
    for index, size in enumerate(sizes):
        if size <= left:
            kept.append(index)
            left -= size
    return kept


def tag_folder(checkpoint: Path) -> Path | None:
    """The folder DeepSpeed loads: the one ``latest`` names (None without it: not DeepSpeed's)."""
    try:
        tag = (checkpoint / "latest").read_text().strip()
    except (OSError, ValueError):  # ValueError: not text
        return None
    folder = checkpoint / tag
    return folder if tag and folder.is_dir() else None


def cacheable_bytes(meminfo: Path = Path("/proc/meminfo"), proc_cgroup: Path = Path("/proc/self/cgroup"),
                    root: Path = Path("/sys/fs/cgroup")) -> int:
    """MemAvailable, lowered to the room left under this process's memory cgroup and every one
    above it (a Slurm job's limit sits on the job's cgroup, above the task's)."""
    found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read_text(), re.MULTILINE)
    room = int(found[1]) * 1024 if found else 0
    limited = cgroup_room(proc_cgroup, root)
    return max(room if limited is None else min(room, limited), 0)


# (folder under the cgroup root, limit file, usage file, memory.stat's inactive page cache):
# cgroup v2, then v1's memory controller
_CONTROLLERS = (("", "memory.max", "memory.current", "inactive_file"),
                ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))


def _inactive_file(folder: Path, key: str) -> int:
    """The cgroup's inactive page cache (memory.stat), 0 where it cannot be read."""
    try:
        found = re.search(rf"^{key} (\d+)$", (folder / "memory.stat").read_text(), re.MULTILINE)
    except OSError:
        return 0
    return int(found[1]) if found else 0


def cgroup_room(proc_cgroup: Path, root: Path) -> int | None:
    """The least (limit - usage) over this process's memory cgroup and its ancestors, v2
    (the ``0::`` line) or v1 (the ``memory`` controller's line); None where none is limited.
    Usage counts page cache, so the inactive part of it (memory.stat), which the kernel drops
    first, is taken off as a working-set figure does: on 2 x H200 (session 40) a node whose
    cgroup held the checkpoint it had just written saw too little room for a 37 GiB file."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        for sub, limit_file, usage_file, inactive in _CONTROLLERS:
            if (sub == "" and controllers == "") or (sub and sub in controllers.split(",")):
                base = root / sub
                folder = base / path.strip().lstrip("/")
                while True:
                    try:
                        limit = (folder / limit_file).read_text().strip()
                        if limit != "max":
                            usage = int((folder / usage_file).read_text())
                            rooms.append(int(limit) - usage + _inactive_file(folder, inactive))
                    except (OSError, ValueError):
                        pass
                    if folder == base or base not in folder.parents:
                        break
                    folder = folder.parent
    return min(rooms) if rooms else None


_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore(2): only the low bit of each byte is defined


@functools.cache
def _libc() -> Any:
    """libc's mmap, mincore and munmap with their C types (None where there is no libc)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mincore.restype = ctypes.c_int
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def _mincore_answers(fd: int) -> bool:
    """Since Linux 5.2 mincore reports every page of a file mapping as cached unless the caller
    owns the file or may write it (mm/mincore.c ``can_do_mincore``, against page-cache side
    channels): a checkpoint of another account would read as cached and never be prefetched."""
    euid = os.geteuid()
    return euid == 0 or os.fstat(fd).st_uid == euid or os.access(f"/proc/self/fd/{fd}", os.W_OK)


def cached_pages(fd: int, size: int) -> bytes | None:
    """One byte a page of the file's first ``size`` bytes, 1 where the page is in the page cache,
    0 where not; None where the kernel cannot be asked (no libc, no mincore, a failed mapping, a
    file it would not answer for truthfully)."""
    libc = _libc()
    if libc is None or size <= 0 or not _mincore_answers(fd):
        return None
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == ctypes.c_void_p(-1).value:  # MAP_FAILED
        return None
    try:
        pages = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        if libc.mincore(address, size, pages) != 0:
            return None
        return pages.raw.translate(_LOW_BIT)
    finally:
        libc.munmap(address, size)


def _resident(path: Path, size: int) -> bytes | None:
    """``cached_pages`` of the file at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return cached_pages(fd, size)
    finally:
        os.close(fd)


def uncached_bytes(size: int, pages: bytes | None) -> int:
    """What reading the file would add to the page cache: its pages not there yet (the whole
    file where mincore cannot say)."""
    return size if pages is None else min(size, pages.count(0) * mmap.PAGESIZE)


class Prefetch:
    """The reading thread and what it did, for the rank's one line at train begin."""

    def __init__(self, files: list[Path], total: int, skipped: int,
                 resident: Mapping[Path, bytes | None] | None = None) -> None:
        self.files, self.total, self.skipped = files, total, skipped
        self.resident = dict(resident or {})  # start()'s answers, not asked again
        self.read = 0
        self.cached = 0  # of ``read``: chunks found in the page cache and not copied again
        self.began = time.monotonic()
        self.ended: float | None = None
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-prefetch", daemon=True)

    def start(self) -> Prefetch:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            buffer = bytearray(CHUNK)
            for path in self.files:
                try:
                    self._read(path, buffer)
                except OSError as exc:  # a prefetch never ends a run: the load reads what it needs
                    self.error += f"; {path.name} not read: {exc}"
        finally:
            self.ended = time.monotonic()

    def _read(self, path: Path, buffer: bytearray) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            resident = self.resident.get(path)
            if resident is None or len(resident) != (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE:
                resident = cached_pages(fd, size)
            per_chunk = CHUNK // mmap.PAGESIZE
            offset = 0
            while not self._stop.is_set() and offset < size:
                first = offset // mmap.PAGESIZE
                if resident is not None and 0 not in resident[first:first + per_chunk]:
                    got = min(CHUNK, size - offset)  # in the page cache already: not copied
                    self.cached += got
                elif not (got := os.preadv(fd, [buffer], offset)):
                    break  # the file is shorter than it was
                offset += got
                self.read += got
        finally:
            os.close(fd)

    def stop(self) -> str:
        """End the reading (at train begin) and say what it read and when it ended."""
        self._stop.set()
        now = time.monotonic()
        when = (f"in {self.ended - self.began:.1f} s, {now - self.ended:.1f} s before train begin"
                if self.ended is not None else f"still reading at train begin, {now - self.began:.1f} s")
        left = f"; {self.skipped} file(s) over its memory share not read" if self.skipped else ""
        cached = (f"; {self.cached / 2**30:.1f} GiB of it found in the page cache, not copied"
                  if self.cached else "")
        return (f"checkpoint prefetch: {self.read / 2**30:.1f} of {self.total / 2**30:.1f} GiB in "
                f"{len(self.files)} file(s) {when}{cached}{left}{self.error}")


def start(run: RunRecord, resume: Path | None, rank: int, env: Mapping[str, str]) -> Prefetch | None:
    """On a DeepSpeed resume, start reading this rank's files (None: nothing to read)."""
    folder = tag_folder(resume) if resume is not None and wanted(run, env) else None
    if folder is None:
        return None
    first_on_node = rank % max(run.procs_per_node, 1) == 0  # ranks are contiguous a node
    try:
        names = rank_files(sorted(p.name for p in folder.iterdir()), rank, first_on_node)
        sizes = [(folder / n).stat().st_size for n in names]
        pages = [_resident(folder / n, size) for n, size in zip(names, sizes, strict=True)]
        uncached = [uncached_bytes(size, p) for size, p in zip(sizes, pages, strict=True)]
        # the cached part is reclaimable memory too (MemAvailable, the cgroup's inactive page
        # cache): counting it as room would let the reads evict what they skip
        room = max(cacheable_bytes() - (sum(sizes) - sum(uncached)), 0)
        kept = within_budget(uncached, room, run.procs_per_node)
    except (OSError, ValueError):  # nothing read ahead; the load reads as before
        return None
    files = [folder / names[i] for i in kept]  # none kept: the line says so all the same
    return Prefetch(files, sum(sizes[i] for i in kept), len(names) - len(kept),
                    {folder / names[i]: pages[i] for i in kept}).start()


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """At train begin (the checkpoint is read by then) stop the thread and print its line."""
    prefetch: Prefetch | None = ctx.prefetch
    if prefetch is None:
        return []
    from transformers import TrainerCallback  # here: the module imports without the training stack

    running = prefetch

    class PrefetchCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            print(f"[checkpoint] {running.stop()}", flush=True)
            return control

    trainer.add_callback(PrefetchCallback())
    return []
