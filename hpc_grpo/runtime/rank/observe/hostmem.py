"""This rank's host memory, for metrics.jsonl: what the plan's "CPU memory per node" models.

Why: a process tree's memory sampled from outside (tests/gpu HostPeak) cannot say what a rank
holds: anonymous memory (optimizer state), mapped files (libraries, safetensors) or shared memory
(pinned buffers), the last two counted again in every process that maps them. /proc/self/status
splits them (``RssAnon``, ``RssFile``, ``RssShmem``) and keeps the process's own peak
(``VmHWM``); torch's pinned host allocator, which rounds every block up to a power of two,
reports what it holds (``torch.cuda.host_memory_stats``, CUDA only). All in GiB; keys missing
where the system or torch does not report them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GIB = float(2**30)
STATUS_FIELDS = {"VmHWM": "peak_rss", "VmRSS": "rss", "RssAnon": "anon", "RssFile": "file",
                 "RssShmem": "shmem"}


def from_status(text: str) -> dict[str, float]:
    """The fields above from a /proc/PID/status text (values in kB), in GiB."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS and value.split():
            out[STATUS_FIELDS[key]] = round(int(value.split()[0]) * 1024 / GIB, 3)
    return out


def pinned(torch: Any) -> dict[str, float]:
    """torch's pinned host allocator: bytes held now and at peak, in GiB ({} without CUDA)."""
    try:
        if not torch.cuda.is_available():
            return {}
        stats = torch.cuda.host_memory_stats()
    except (AttributeError, RuntimeError):
        return {}
    keys = {"reserved_bytes.current": "pinned_reserved", "reserved_bytes.peak": "pinned_reserved_peak",
            "allocated_bytes.current": "pinned_allocated"}
    return {ours: round(float(stats[k]) / GIB, 3) for k, ours in keys.items() if k in stats}


def sample(torch: Any, status: Path = Path("/proc/self/status")) -> dict[str, float]:
    try:
        text = status.read_text()
    except OSError:
        text = ""
    return {**from_status(text), **pinned(torch)}
