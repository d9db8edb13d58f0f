"""A SIGUSR2 inside a generation block, resumed exactly, on one GPU with the colocated engine.

The CPU proof is tests/slow/test_resume_generation_buffer.py; here the buffer is CUDA tensors
(with the log-probs vLLM's importance sampling adds) and the completions come from vLLM.
steps_per_generation 4: one generation trains steps 1-4, the next 5-8. The node task gets
SIGUSR2 once step 1 is logged, so the ranks stop at step 2 or 3, inside the first block; the
resume must train steps 3/4-8 exactly as the uninterrupted run did. Marked ``gpu``; one device
call (about 4 minutes with a warm compile cache, the two runs share it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.checkpoint_resume_helpers import _attempt, _metrics, _node_env
from tests.gpu.gpu_helpers import _site, needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu

STEPS = 8
SETS = {"max_steps": STEPS, "learning_rate": 1e-5, "per_device_train_batch_size": 8,
        "num_generations": 8, "max_completion_length": 64, "save_steps": 1000,
        "steps_per_generation": 4}


@needs_gpu
def test_usr2_inside_a_generation_block_resumes_exactly(tmp_path: Path) -> None:
    site = _site(tmp_path, 1)
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
         "builtin:qwen2-0.5b", "--run-id", "blocks-reference", "--wait",
         *(f"--set={k}={v}" for k, v in SETS.items())],
        capture_output=True, text=True, timeout=560,
        env={**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match, proc.stdout
    reference = Path(match.group(1))
    shutil.rmtree(reference / "checkpoints")

    run_dir = reference.parent / "blocks-interrupted"
    run_dir.mkdir()
    record = json.loads((reference / "run.json").read_text())
    record.update(run_id="blocks-interrupted", run_dir=str(run_dir))
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    env = _node_env()
    attempts = [_attempt(run_dir, env, stop_after=1), _attempt(run_dir, env, stop_after=None)]
    keys = ("step", "reward_mean", "reward_std", "loss")
    steps = [{k: r.get(k) for k in keys} for r in _metrics(run_dir)]
    ref = [{k: r.get(k) for k in keys} for r in _metrics(reference)]
    stop = attempts[0]["step"]
    held = sorted(p.name for p in (run_dir / "checkpoints" / f"checkpoint-{stop}" /
                                   "generation-buffer").glob("*.pt"))
    log = (run_dir / "logs" / "rank-0.log").read_text()
    result = {"attempts": attempts, "steps": steps, "reference": ref, "buffer_files": held,
              "restored": [ln for ln in log.splitlines() if "generation buffer" in ln]}
    _save("generation-buffer-gpu", result)
    assert [a["phase"] for a in attempts] == ["interrupted", "done"], attempts
    assert stop in (1, 2, 3), f"stopped at {stop}: not inside the first block, nothing shown"
    assert held == ["rank-0.pt"] and len(result["restored"]) == 1, result
    assert [r["reward_mean"] is not None for r in ref] == [s in (1, 5) for s in range(1, STEPS + 1)]
    assert steps == ref, result
