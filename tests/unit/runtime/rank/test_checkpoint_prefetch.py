"""runtime/rank/checkpoints/prefetch.py: which files a rank reads ahead, within what share of the
node's memory, and that the thread reads them whole (on real files) and stops when told."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime.rank.checkpoints import prefetch as prefetch
from tests.unit.runtime.rank.runtime_checks_helpers import make_run, record

# DeepSpeed 0.19's names in a tag folder (global_step<N>/), bf16 runs
ZERO2 = ["bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
         "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", "mp_rank_00_model_states.pt"]
ZERO3_12 = [f"{kind}zero_pp_rank_{r}_mp_rank_00_{what}_states.pt"
            for r in range(12) for kind, what in (("", "model"), ("bf16_", "optim"))]


def _run(ppn: int = 2, **deepspeed: Any) -> Any:
    ds = {"zero_stage": 2, **deepspeed} if deepspeed.get("zero_stage", 2) is not None else None
    return record(make_run(1, ppn, 1) | {"device": "cuda", "deepspeed": ds})


def test_zero2_the_shared_module_states_once_a_node_then_the_own_partition() -> None:
    assert prefetch.rank_files(ZERO2, 0, first_on_node=True) == [
        "mp_rank_00_model_states.pt", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"]
    assert prefetch.rank_files(ZERO2, 1, first_on_node=False) == [
        "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    # the first rank of another node reads the shared file into its own page cache
    assert prefetch.rank_files(ZERO2, 1, first_on_node=True)[0] == "mp_rank_00_model_states.pt"


def test_zero3_every_rank_its_own_module_states_and_rank_1_is_not_rank_11() -> None:
    assert prefetch.rank_files(ZERO3_12, 1, first_on_node=False) == [
        "zero_pp_rank_1_mp_rank_00_model_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert prefetch.rank_files(ZERO3_12, 11, first_on_node=True) == [
        "zero_pp_rank_11_mp_rank_00_model_states.pt", "bf16_zero_pp_rank_11_mp_rank_00_optim_states.pt"]
    assert prefetch.rank_files(["model.safetensors", "latest", "zero_to_fp32.py"], 0, True) == []


@pytest.mark.parametrize(("sizes", "cacheable", "ranks", "kept"), [
    ([10, 30], 160, 2, [0, 1]),  # share 40: both
    ([10, 31], 160, 2, [0]),     # the second passes what is left of the share
    ([50, 1], 160, 2, [1]),      # the first alone passes it: passed over, the next still read
    ([], 160, 2, []),
    ([1], 10, 0, [0]),           # a run record without ranks per node counts one
])
def test_half_the_cacheable_memory_shared_by_the_node_s_ranks(
        sizes: list[int], cacheable: int, ranks: int, kept: list[int]) -> None:
    assert prefetch.within_budget(sizes, cacheable, ranks) == kept


def _limits(folder: Path, limit: str, usage: int, names: tuple[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / names[0]).write_text(limit + "\n")
    (folder / names[1]).write_text(f"{usage}\n")


def test_cacheable_is_memavailable_lowered_to_the_job_s_cgroup_v2(tmp_path: Path) -> None:
    """A Slurm job's limit sits on the job's cgroup, above the task's own (limit "max")."""
    meminfo, proc, root = tmp_path / "meminfo", tmp_path / "cgroup", tmp_path / "sys"
    meminfo.write_text("MemTotal:  1000 kB\nMemAvailable:     800 kB\n")
    proc.write_text("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 800 * 1024  # no cgroup files at all
    job = root / "system.slice" / "slurmstepd.scope" / "job_7"
    v2 = ("memory.max", "memory.current")
    _limits(job / "step_0" / "user" / "task_0", "max", 5, v2)
    _limits(job, f"{300 * 1024}", 100 * 1024, v2)
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 200 * 1024
    _limits(job, f"{300 * 1024}", 400 * 1024, v2)  # over its limit already
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 0
    _limits(job, "max", 0, v2)
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 800 * 1024


def test_the_cgroup_s_inactive_page_cache_counts_as_room(tmp_path: Path) -> None:
    """A node that just wrote the checkpoint: its cgroup's usage is mostly page cache, which the
    kernel drops first (memory.stat's inactive_file, v2; total_inactive_file, v1)."""
    meminfo, proc, root = tmp_path / "meminfo", tmp_path / "cgroup", tmp_path / "sys"
    meminfo.write_text("MemAvailable:     800 kB\n")
    proc.write_text("0::/job_7\n")
    _limits(root / "job_7", f"{300 * 1024}", 250 * 1024, ("memory.max", "memory.current"))
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 50 * 1024
    (root / "job_7" / "memory.stat").write_text(f"anon 1\nfile 2\ninactive_file {150 * 1024}\n")
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 200 * 1024
    proc.write_text("4:memory:/job_9\n")
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    _limits(root / "memory" / "job_9", f"{500 * 1024}", 450 * 1024, v1)
    (root / "memory" / "job_9" / "memory.stat").write_text(
        f"inactive_file 5\ntotal_inactive_file {100 * 1024}\n")  # v1: the hierarchy's total
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 150 * 1024


def test_cgroup_v1_s_memory_controller_and_a_missing_file(tmp_path: Path) -> None:
    meminfo, proc, root = tmp_path / "meminfo", tmp_path / "cgroup", tmp_path / "sys"
    meminfo.write_text("MemAvailable:     800 kB\n")
    proc.write_text("4:memory:/slurm/uid_0/job_9/step_0\n3:cpuset:/slurm/uid_0/job_9\n0::/\n")
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    _limits(root / "memory" / "slurm" / "uid_0" / "job_9", f"{500 * 1024}", 450 * 1024, v1)
    _limits(root / "memory", "9223372036854771712", 10, v1)  # the root: unlimited
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 50 * 1024
    proc.unlink()
    assert prefetch.cacheable_bytes(meminfo, proc, root) == 800 * 1024


@pytest.mark.parametrize(("ds", "env", "expected"), [
    ({"zero_stage": 2}, {}, True),
    ({"zero_stage": 3, "offload_optimizer": True}, {}, True),  # offload reads the same files
    ({"zero_stage": None}, {}, False),  # no DeepSpeed: transformers' own files, not these
    ({"zero_stage": 2}, {prefetch.ENV: "0"}, False),
])
def test_where_it_is_on(ds: dict[str, Any], env: dict[str, str], expected: bool) -> None:
    assert prefetch.wanted(_run(**ds), env) is expected


def _checkpoint(root: Path, sizes: dict[str, int], tag: str = "global_step4") -> Path:
    folder = root / "checkpoint-4" / tag
    folder.mkdir(parents=True)
    (folder.parent / "latest").write_text(tag + "\n")
    (folder.parent / "model.safetensors").write_bytes(b"x" * 1000)  # not read on this resume
    for name, size in sizes.items():
        (folder / name).write_bytes(bytes(range(256)) * (size // 256))
    return folder.parent


def test_a_resume_reads_the_rank_s_files_whole_and_says_so(tmp_path: Path) -> None:
    mib = 1 << 20
    checkpoint = _checkpoint(tmp_path, {ZERO2[0]: 40 * mib, ZERO2[1]: 8 * mib, ZERO2[2]: 20 * mib})
    started = prefetch.start(_run(), checkpoint, 0, {})
    assert started is not None
    assert [p.name for p in started.files] == [ZERO2[2], ZERO2[0]]  # load order, not rank 1's
    deadline = time.monotonic() + 30
    while started.ended is None and time.monotonic() < deadline:
        time.sleep(0.01)
    line = started.stop()
    assert started.read == started.total == 60 * mib and not started.error
    assert line.startswith("checkpoint prefetch: 0.1 of 0.1 GiB in 2 file(s) in ")
    assert "s before train begin" in line


def test_stopping_ends_the_reading_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "CHUNK", 1 << 16)  # many reads: the stop lands between two
    checkpoint = _checkpoint(tmp_path, {ZERO2[2]: 64 << 20})
    started = prefetch.Prefetch([checkpoint / "global_step4" / ZERO2[2]], 64 << 20, 0)
    started._stop.set()  # told before its first read
    started.start()._thread.join(10)
    assert started.read == 0 and started.ended is not None


def test_nothing_without_a_deepspeed_checkpoint_or_when_off(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, {ZERO2[2]: 1 << 16})
    assert prefetch.start(_run(), None, 0, {}) is None  # a fresh start
    assert prefetch.start(_run(), checkpoint, 0, {prefetch.ENV: "0"}) is None
    assert prefetch.start(_run(zero_stage=None), checkpoint, 0, {}) is None
    (checkpoint / "latest").unlink()  # transformers' own layout: no tag folder to read
    assert prefetch.start(_run(), checkpoint, 0, {}) is None


def test_a_file_that_cannot_be_read_is_a_line_and_the_next_is_still_read(tmp_path: Path) -> None:
    present = tmp_path / "present.pt"
    present.write_bytes(b"x" * 1000)
    started = prefetch.Prefetch([tmp_path / "gone.pt", present], 1010, 0).start()
    started._thread.join(10)
    line = started.stop()
    assert "; gone.pt not read: " in line and started.read == 1000 and started.ended is not None


def test_nothing_within_the_share_is_still_a_line(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = _checkpoint(tmp_path, {})
    for name in (ZERO2[0], ZERO2[2]):  # not in the page cache: each would add 1 MiB to it
        os.close(_cold_file(checkpoint / "global_step4" / name, 1))
    monkeypatch.setattr(prefetch, "cacheable_bytes", lambda: 1000)
    started = prefetch.start(_run(), checkpoint, 0, {})
    assert started is not None and started.files == []
    started._thread.join(10)
    assert started.stop().startswith("checkpoint prefetch: 0.0 of 0.0 GiB in 0 file(s) in ")
    assert "; 2 file(s) over its memory share not read" in started.stop()


def test_an_unreadable_tag_folder_reads_nothing_and_raises_nothing(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, {ZERO2[2]: 1 << 16})
    (checkpoint / "latest").write_bytes(b"\xff\xfe")  # not text
    assert prefetch.start(_run(), checkpoint, 0, {}) is None


def _cold_file(path: Path, mib: int) -> int:
    """A file of ``mib`` MiB written and dropped from the page cache; returns its descriptor."""
    path.write_bytes(bytes(range(256)) * (mib << 12))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    pages = prefetch.cached_pages(fd, mib << 20)
    if pages is None or 1 in pages:
        os.close(fd)
        pytest.skip("this file system keeps the pages after POSIX_FADV_DONTNEED")
    return fd


def test_cached_pages_says_which_pages_are_in_the_page_cache(tmp_path: Path) -> None:
    fd = _cold_file(tmp_path / "part.pt", 4)
    try:
        os.pread(fd, 1 << 20, 2 << 20)  # the third MiB
        pages = prefetch.cached_pages(fd, 4 << 20)
        per_mib = (1 << 20) // mmap.PAGESIZE
        assert pages is not None and len(pages) == 4 * per_mib
        assert pages[2 * per_mib:3 * per_mib] == b"\x01" * per_mib
        assert pages[:2 * per_mib] == bytes(2 * per_mib) and pages[3 * per_mib:] == bytes(per_mib)
        assert prefetch.cached_pages(fd, 0) is None  # nothing to map
    finally:
        os.close(fd)


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    offsets: list[int] = []
    real = os.preadv

    def counted(fd: int, buffers: list[bytearray], offset: int) -> int:
        offsets.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(prefetch.os, "preadv", counted)
    return offsets


def test_chunks_already_in_the_page_cache_are_not_copied_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm requeue: only what the page cache lacks is read; the line says how much was there."""
    monkeypatch.setattr(prefetch, "CHUNK", 1 << 20)
    path = tmp_path / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    fd = _cold_file(path, 4)
    os.pread(fd, 1 << 20, 1 << 20)  # the second chunk is cached, the others not
    offsets = _count_reads(monkeypatch)
    started = prefetch.Prefetch([path], 4 << 20, 0).start()
    started._thread.join(10)
    line = started.stop()
    assert offsets == [0, 2 << 20, 3 << 20]  # every chunk but the cached one, in order
    assert started.read == 4 << 20 and started.cached == 1 << 20
    assert "; 0.0 GiB of it found in the page cache, not copied" in line
    assert prefetch.cached_pages(fd, 4 << 20) == b"\x01" * ((4 << 20) // mmap.PAGESIZE)
    os.close(fd)


def test_without_mincore_every_chunk_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "CHUNK", 1 << 20)
    monkeypatch.setattr(prefetch, "cached_pages", lambda fd, size: None)
    path = tmp_path / "mp_rank_00_model_states.pt"
    path.write_bytes(b"x" * ((3 << 20) + 5))  # cached (just written), and a partial last chunk
    offsets = _count_reads(monkeypatch)
    started = prefetch.Prefetch([path], (3 << 20) + 5, 0).start()
    started._thread.join(10)
    assert offsets == [0, 1 << 20, 2 << 20, 3 << 20] and started.read == (3 << 20) + 5
    assert started.cached == 0 and "page cache" not in started.stop()


def test_a_cached_file_costs_the_share_nothing_and_its_pages_are_no_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The share is what reading would add to the page cache, and the cached part of the rank's
    files is taken off the room (MemAvailable and the cgroup's inactive page cache count it as
    reclaimable: reads into that room would evict what was skipped)."""
    checkpoint = _checkpoint(tmp_path, {ZERO2[2]: 1 << 20})  # just written: in the page cache
    cold = _cold_file(checkpoint / "global_step4" / ZERO2[0], 1)  # rank 0's partition, dropped
    os.close(cold)
    monkeypatch.setattr(prefetch, "cacheable_bytes", lambda: 5 << 20)  # less 1 cached; 2 ranks
    started = prefetch.start(_run(), checkpoint, 0, {})
    assert started is not None
    started._thread.join(10)
    assert [p.name for p in started.files] == [ZERO2[2], ZERO2[0]] and started.skipped == 0
    assert started.cached == 1 << 20 and started.read == 2 << 20  # the cached file not copied
    monkeypatch.setattr(prefetch, "cacheable_bytes", lambda: (5 << 20) - 4)  # a page short
    os.close(_cold_file(checkpoint / "global_step4" / ZERO2[0], 1))
    passed = prefetch.start(_run(), checkpoint, 0, {})
    assert passed is not None and [p.name for p in passed.files] == [ZERO2[2]] and passed.skipped == 1
    passed._thread.join(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a file to another account")
def test_a_file_mincore_would_not_answer_for_reads_as_uncached(tmp_path: Path) -> None:
    """Linux 5.2+: for a file the caller neither owns nor may write, mincore says every page is
    cached. Such a file must count as uncached (read), not as cached (skipped)."""
    path = tmp_path / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    os.close(_cold_file(path, 1))
    path.chmod(0o644)  # others may read it, not write it
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # another account: nobody
        os.close(reader)
        try:
            fd = os.open(path, os.O_RDONLY)  # as a job's rank holds it: opened, then asked
            os.setuid(65534)
            pages = prefetch.cached_pages(fd, 1 << 20)
            os.write(writer, b"none" if pages is None else str(pages.count(1)).encode())
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which fails on it
            os.write(writer, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(writer)
    answer = os.read(reader, 64)
    os.waitpid(child, 0)
    assert answer == b"none"  # not "256" (every page "cached"), which a plain mincore gives
