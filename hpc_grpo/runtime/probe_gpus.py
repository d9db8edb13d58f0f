"""The probe's GPU memory fact (runtime/probe.py, doctor's on-node half): what doctor's "plan
hardware" row compares with the profile's gpu_memory_gib (preflight/hardware_row.py). Stdlib
only; torch only where nvidia-smi is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any


def gpu_memory(expected: int, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Total memory (GiB) of the smallest GPU this task may use (nvidia-smi's, of the GPUs
    CUDA_VISIBLE_DEVICES numbers; else torch's), for doctor's comparison with gpu_memory_gib."""
    if not expected:
        return None
    visible = [v.strip() for v in (env if env is not None else os.environ).get(
        "CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    smi, source = shutil.which("nvidia-smi"), "nvidia-smi memory.total"
    out = subprocess.run([smi, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout if smi else ""
    rows = [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.count(",") == 1]
    gib = [float(mib) / 1024 for index, mib in rows
           if not visible or not all(v.isdigit() for v in visible) or index in visible]
    if not gib:
        import torch  # here: the module imports without torch

        source = "torch total_memory"
        gib = [torch.cuda.get_device_properties(i).total_memory / 2**30
               for i in range(torch.cuda.device_count())]
    return {"gib": round(min(gib), 2) if gib else None, "source": source}
