"""The GPU tests' machine checks and site (moved out of test_gpu.py, shared by every GPU test module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


needs_gpu = pytest.mark.skipif(_gpus() < 1, reason="no CUDA GPU here")


def needs_two(test: Any) -> Any:
    """Two GPUs: marked ``multi_gpu`` too, so ``-m "gpu and not multi_gpu"`` leaves it out."""
    return pytest.mark.multi_gpu(pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs")(test))


def machine() -> tuple[float, float]:
    """This machine's GPU memory (GiB, what CUDA reports for GPU 0: 79.2 on an "80 GB" H100,
    139.8 on an H200) and host memory (GiB: MemTotal, or a smaller cgroup limit), read as the
    ranks' hardware check reads them (runtime/rank/setup/hardware_check.py): a profile written from
    them plans for the machine the test runs on, so the same test passes on H100 and H200."""
    import torch

    from hpc_grpo.runtime.rank.setup.hardware_check import usable_host_gib

    gpu = torch.cuda.mem_get_info(0)[1] / 2**30
    host = usable_host_gib({})
    assert host is not None, "no /proc/meminfo"
    return gpu, host


def _site(tmp_path: Path, gpus: int) -> Path:
    gpu, host = machine()
    path = tmp_path / f"gpu{gpus}.yaml"
    path.write_text(f"scheduler: local\ngpus_per_node: {gpus}\ngpu_memory_gib: {gpu:.0f}\n"
                    f"cpu_memory_gib: {host:.0f}\noutput_root: {tmp_path / 'runs'}\n")
    return path
