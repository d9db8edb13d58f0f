"""rank/observe/memory.py: /proc status fields and torch's pinned-allocator figures, in GiB."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from hpc_grpo.runtime.rank.observe import memory

STATUS = """Name:\tpython3
VmPeak:\t123456789 kB
VmHWM:\t 31457280 kB
VmRSS:\t 20971520 kB
RssAnon:\t 16777216 kB
RssFile:\t  3145728 kB
RssShmem:\t 1048576 kB
Threads:\t77
"""


def test_status_fields_in_gib() -> None:
    assert memory.from_status(STATUS) == {"peak_rss": 30.0, "rss": 20.0, "anon": 16.0,
                                           "file": 3.0, "shmem": 1.0}
    assert memory.from_status("VmHWM:\n") == {}


def test_pinned_allocator_only_with_cuda() -> None:
    stats = {"reserved_bytes.current": 8 * 2**30, "reserved_bytes.peak": 12 * 2**30,
             "allocated_bytes.current": 5 * 2**30, "num_host_alloc": 3}
    cuda = SimpleNamespace(is_available=lambda: True, host_memory_stats=lambda: stats)
    assert memory.pinned(SimpleNamespace(cuda=cuda)) == {
        "pinned_reserved": 8.0, "pinned_reserved_peak": 12.0, "pinned_allocated": 5.0}
    cpu = SimpleNamespace(is_available=lambda: False, host_memory_stats=lambda: stats)
    assert memory.pinned(SimpleNamespace(cuda=cpu)) == {}
    old = SimpleNamespace(is_available=lambda: True)  # a torch without the call
    assert memory.pinned(SimpleNamespace(cuda=old)) == {}


def test_sample_of_this_process(tmp_path: Path) -> None:
    import torch

    own = memory.host_sample(torch)
    assert own["peak_rss"] >= own["rss"] > 0.01
    assert memory.host_sample(torch, tmp_path / "missing") == memory.pinned(torch)
