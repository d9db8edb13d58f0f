"""A GPU workstation as a first-class site (#58), on a real GPU: `site init ws --local` writes a
profile whose GPU count and memory are what CUDA reports, `plan --site ws` plans for them, and
the shipped `local` profile (`gpus_per_node: auto`) reads the same GPUs with a line saying so.

Marked ``gpu``. On the lent machine (docs/gpu.md): ``HPC_GRPO_RESULTS=DIR scripts/on-gpu python3
-m pytest -q -m gpu tests/gpu/test_site_init_local_gpu.py`` (seconds: it plans, nothing trains).
nvidia-smi's memory.total is a little more than CUDA's total_memory (143,771 MiB against about
139.8 GiB on an H200): the two are compared within 2%, and the profile never below CUDA's figure
by more than the ranks' hardware check allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_grpo.config.site import load_site
from hpc_grpo.rundir.hardware import TOLERANCE, below
from tests.gpu.gpu_helpers import needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpc_grpo.cli", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env, "COLUMNS": "300"})


@needs_gpu
def test_site_init_local_and_plan_see_the_gpus_cuda_sees(tmp_path: Path) -> None:
    import torch

    count = torch.cuda.device_count()
    cuda_gib = min(torch.cuda.get_device_properties(i).total_memory
                   for i in range(count)) / 2**30
    env = {"HPC_GRPO_SITES": str(tmp_path / "sites"), "HPC_GRPO_HOME": str(tmp_path / "home")}
    init = _cli(env, "site", "init", "ws", "--local")
    assert init.returncode == 0, init.stdout + init.stderr
    site = load_site(str(tmp_path / "sites" / "ws.yaml"), [])
    assert (site.scheduler, site.gpus_per_node, site.procs_per_node) == ("local", count, count)
    assert abs(site.gpu_memory_gib - cuda_gib) / cuda_gib < 0.02, (site.gpu_memory_gib, cuda_gib)
    assert not below(cuda_gib, site.gpu_memory_gib, TOLERANCE)  # the ranks' check would pass
    plan = _cli(env, "plan", "--site", "ws", "--model", "Qwen/Qwen2.5-0.5B", "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    data = json.loads(plan.stdout)
    assert (data["device"], data["procs_per_node"], data["world_size"]) == ("cuda", count, count)
    shipped = _cli(env, "plan", "--site", "local", "--model", "Qwen/Qwen2.5-0.5B")
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    line = next((ln for ln in shipped.stdout.splitlines() if ln.startswith("this machine: ")), "")
    assert f"this machine: {count} x " in line and "from nvidia-smi" in line, shipped.stdout
    _save("workstation-site-init", {
        "gpus": count, "cuda_total_gib": round(cuda_gib, 2), "profile": {
            "gpus_per_node": site.gpus_per_node, "gpu_type": site.gpu_type,
            "gpu_memory_gib": site.gpu_memory_gib, "cpus_per_node": site.cpus_per_node,
            "cpu_memory_gib": site.cpu_memory_gib},
        "site_init": init.stdout, "machine_line": line,
        "profile_text": (tmp_path / "sites" / "ws.yaml").read_text()})
