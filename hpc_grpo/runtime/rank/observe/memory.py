"""This rank's memory for metrics.jsonl: the GPU's as the driver sees it, and the host's as the
kernel splits it.

GPU: the peak as the driver sees it (vLLM's pools included), sampled in a thread. The planner's
prediction is compared with NVML's used memory, not with torch's allocator statistics. Those
miss the CUDA context and NCCL's buffers, and they count vLLM's sleep-mode pool (vLLM allocates
it through torch's pluggable allocator) as allocated even while it sleeps with its physical
memory released: on an H200, 45.4 GiB "allocated" at train begin with NVML at 27.1 GiB (issue
#15). So torch's peaks are neither a lower bound of the device's use nor "NVML minus vLLM"; only
a difference of two runs with the same engine (the same pool in both) reads as the trainer's own
memory.

Host: what the plan's "CPU memory per node" models. Why: a process tree's memory sampled from
outside (tests/gpu HostPeak) cannot say what a rank holds: anonymous memory (optimizer state),
mapped files (libraries, safetensors) or shared memory (pinned buffers), the last two counted
again in every process that maps them. /proc/self/status splits them (``RssAnon``, ``RssFile``,
``RssShmem``) and keeps the process's own peak (``VmHWM``); torch's pinned host allocator, which
rounds every block up to a power of two, reports what it holds
(``torch.cuda.host_memory_stats``, CUDA only). All in GiB; keys missing where the system or
torch does not report them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def physical_gpu(cuda_index: int) -> int:
    """NVML numbers GPUs physically; CUDA numbers the ones CUDA_VISIBLE_DEVICES shows."""
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible) and visible[cuda_index].strip().isdigit():
        return int(visible[cuda_index])
    return cuda_index


class GpuMemorySampler:
    """Samples used memory of one device every ``interval`` seconds; ``peak_gib`` is the max,
    ``phase_peaks_gib`` the max within each phase ``phase()`` names when a sample is taken."""

    def __init__(self, device_index: int, interval: float = 0.05,
                 phase: Callable[[], str] = lambda: "all") -> None:
        self.peak_bytes = 0
        self.phase_peaks: dict[str, int] = {}
        self._phase = phase
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._interval = interval
        try:
            import pynvml  # here: an optional package, imported where it is used

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self._nvml = pynvml
        except Exception:  # no NVML (CPU machine): the sampler reports nothing
            self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def sample(self) -> int:
        if self._handle is None:
            return 0
        phase = self._phase()
        used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        self.peak_bytes = max(self.peak_bytes, used)
        self.phase_peaks[phase] = max(self.phase_peaks.get(phase, 0), used)
        return used

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def start(self) -> GpuMemorySampler:
        if self._handle is not None and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpu-mem", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30

    def phase_peaks_gib(self) -> dict[str, float]:
        return {phase: round(used / 2**30, 3) for phase, used in sorted(self.phase_peaks.items())}


# The host's memory.
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


def host_sample(torch: Any, status: Path = Path("/proc/self/status")) -> dict[str, float]:
    try:
        text = status.read_text()
    except OSError:
        text = ""
    return {**from_status(text), **pinned(torch)}
