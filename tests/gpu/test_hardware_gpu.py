"""A profile that promises more GPU memory than the card has is refused by the ranks before the
model loads (issue #29), on a real GPU: a configuration error with both numbers, one attempt.

Marked ``gpu``. On the lent machine (docs/gpu.md): ``HPC_GRPO_RESULTS=DIR scripts/on-gpu python3
-m pytest -q -m gpu tests/gpu/test_hardware_gpu.py`` (about 60 s once the stack is installed).
The claim is 139 GiB (what site_configs/sandbox-gpu.yaml said on the H100s) where the card has
less, else 1.5 x the card (an H200 or larger).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import machine, needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu


@needs_gpu
def test_a_profile_claiming_more_gpu_memory_is_refused_before_the_model_loads(
    tmp_path: Path,
) -> None:
    gpu, host = machine()
    claim = 139 if gpu < 0.95 * 139 else round(gpu * 1.5)
    site = tmp_path / "claims.yaml"
    site.write_text(f"scheduler: local\ngpus_per_node: 1\ngpu_memory_gib: {claim}\n"
                    f"cpu_memory_gib: {host:.0f}\noutput_root: {tmp_path / 'runs'}\n")
    env_home = {"HPC_GRPO_HOME": str(tmp_path / "home")}
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
         "builtin:qwen2-0.5b", "--wait", "--set=max_steps=2", "--set=max_completion_length=32"],
        capture_output=True, text=True, timeout=500, env={**os.environ, **env_home})
    wall = time.time() - started
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = Path(match.group(1))
    state = json.loads((run_dir / "state.json").read_text())
    log = (run_dir / "logs" / "rank-0.log").read_text()
    status = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", "status", str(run_dir)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env_home, "COLUMNS": "300"})
    result = {"gpu_gib": round(gpu, 2), "host_gib": round(host, 1), "claim_gib": claim,
              "submit_exit": proc.returncode, "wall_s": round(wall, 1), "state": state,
              "retries": (run_dir / "retries.jsonl").exists(),
              "hardware": json.loads((run_dir / "run.json").read_text())["hardware"],
              "status": status.stdout[-2000:],
              "rank0_log_tail": log[-1500:]}
    _save("hardware-refused", result)
    shutil.rmtree(tmp_path / "home", ignore_errors=True)  # the built model (1 GB)
    assert proc.returncode != 0
    assert (state["phase"], state["stop_cause"]) == ("failed", "configuration error"), state
    line = state["message"]
    assert f"GPU memory {gpu:.1f} GiB < planned {claim} GiB (gpu_memory_gib)" in line, line
    assert "\n" not in line
    assert not (run_dir / "retries.jsonl").exists()  # one attempt: not retried
    assert "configuration error, not retried" in log
    # refused right after the rank checks: the inputs (tokenizer, dataset) and the model never
    # loaded (the "[train] model ...; dataset ..." line comes first thing after the check)
    after = log.split("rank checks passed")[-1]
    assert "[train] model " not in after and "training from" not in log, log[-3000:]
    shown = " ".join(status.stdout.split())  # status prints why it failed under its table
    assert f"failed: configuration error: HardwareShortfall: the nodes have less than the plan " \
        f"assumed: GPU memory {gpu:.1f} GiB < planned {claim} GiB" in shown, status.stdout
