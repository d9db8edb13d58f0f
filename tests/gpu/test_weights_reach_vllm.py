"""Weights reach vLLM (issue #15), on one GPU (marked ``gpu``; skipped without CUDA).

Two short runs through ``hpc-grpo submit`` on a local-scheduler profile (test_gpu.py's), each
with the embedded engine in sleep mode and ZeRO-3 (so TRL gathers every shard to push it):
- as shipped: every step's ``vllm_logp_diff_mean`` (vLLM's log-probabilities of the sampled
  tokens against the trainer's, hpc_grpo/runs/drift.py) stays under the bound;
- with the test-only fault ``HPC_GRPO_FAULT_SKIP_WEIGHT_SYNC=1`` (runtime/rank/faults/stale_weights.py:
  the engine keeps the initial weights): the difference exceeds the bound after the first
  optimizer update, and ``status`` flags the run.

Settings, and why. builtin:qwen2-0.5b has random weights, so its log-probabilities start near
uniform; at TRL's default learning rate (1e-6) three updates move them too little to tell a
stale engine from numerics. Adam's first steps move every weight by about the learning rate
(m / sqrt(v) is about +-1), so 1e-4 against the model's 0.02 initial scale changes the logits by
far more than 0.1 nats while both sides still score with the same weights in the healthy run.
Step 1 cannot show drift (no update yet: both hold the initial weights), so the stale run is
judged on steps 2-4. One prompt of 8 completions of 64 tokens a step keeps a run near a minute
and a half after the engine starts; the two runs share one output root, so the second starts
with the first's compile cache. Seen on an H200 (2026-11-24, docs/benchmarks.md): 0.006-0.009
healthy, 0.62-0.65 stale from step 2 (bound 0.1); both tests together 197 s.

The LoRA pair (#14) runs the plan's layout (ZeRO off) with adapters of rank 16 at learning rate
1e-2: TRL merges them into the base model before each push, so a healthy run stays under the
bound and a skipped push (the engine keeps the base model) breaks it.

Since session 40 the engine starts from vLLM's random weights (``load_format="dummy"``,
runtime/rank/generation/engine_weights.py), so a healthy first step under the bound is no longer a given:
it says TRL's first push filled the engine (whole model, LoRA's merged base too); the rank log's
line that the engine did not read the model files is asserted with it.

Run on the lent GPU machine (docs/gpu.md): ``python -m pytest -q -m gpu
tests/gpu/test_weights_reach_vllm.py``. With ``HPC_GRPO_RESULTS`` set, each run's per-step
values are written there as JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runs import drift
from hpc_grpo.runtime.rank.generation import engine_weights
from tests.gpu.gpu_helpers import _site, needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu

STEPS = 4
LEARNING_RATE = 1e-4
# LoRA's B starts at zero and Adam moves it by about the learning rate a step: 1e-2 makes the
# adapters' product (alpha/r = 2) as large as the base weights within a step or two.
LORA_LEARNING_RATE = 1e-2
FAULT = "HPC_GRPO_FAULT_SKIP_WEIGHT_SYNC"  # runtime/rank/faults/stale_weights.py's FAULT_ENV


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One profile and output root for both runs: the second starts with a warm compile cache."""
    return _site(tmp_path_factory.mktemp("weights"), 1)


def _submit(site: Path, run_id: str, env: dict[str, str], lora: bool = False) -> Path:
    settings: dict[str, Any] = {
        "max_steps": STEPS, "learning_rate": LORA_LEARNING_RATE if lora else LEARNING_RATE,
        "per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 64,
        "save_steps": 1000, "vllm_enable_sleep_mode": "true"}
    if lora:
        settings.update(use_peft="true", lora_r=16, lora_alpha=32)
    sets = [f"--set={k}={v}" for k, v in settings.items()]
    layout = [] if lora else ["--zero-stage", "3"]  # LoRA: the plan's layout (ZeRO off)
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
         "builtin:qwen2-0.5b", *layout, "--run-id", run_id, "--wait", *sets],
        capture_output=True, text=True, timeout=420, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match, proc.stdout
    return Path(match.group(1))


def _measure(site: Path, run_id: str, fault: bool, lora: bool = False) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != FAULT}
    if fault:
        env[FAULT] = "1"
    run_dir = _submit(site, run_id, env, lora)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    state = json.loads((run_dir / "state.json").read_text())
    result = {"run_dir": str(run_dir), "fault": fault, "learning_rate": LEARNING_RATE,
              "bound": drift.BOUND_NATS, "phase": state.get("phase"), "notes": state.get("notes"),
              "steps": [{k: m.get(k) for k in ("step", "vllm_logp_diff_mean", "vllm_logp_diff_max",
                                                "loss", "reward_mean", "learning_rate")}
                        for m in metrics],
              "deepspeed": json.loads((run_dir / "deepspeed.json").read_text())
              if (run_dir / "deepspeed.json").exists() else None,
              "run_vllm": json.loads((run_dir / "run.json").read_text())["vllm"],
              "peft": json.loads((run_dir / "run.json").read_text()).get("peft"),
              "engine_lines": [line for log in sorted((run_dir / "logs").glob("rank-*.log"))
                               for line in log.read_text(errors="replace").splitlines()
                               if "vLLM engine" in line]}
    _save(f"weights-reach-vllm-{'lora-' if lora else ''}{'stale' if fault else 'healthy'}", result)
    return result


def _check_layout(result: dict[str, Any]) -> None:
    assert result["phase"] == "done", result
    assert result["run_vllm"]["enable_sleep_mode"] is True
    assert result["deepspeed"]["zero_optimization"]["stage"] == 3
    assert [s["step"] for s in result["steps"]] == list(range(1, STEPS + 1))


@needs_gpu
def test_trained_weights_reach_vllm_every_step(site: Path) -> None:
    result = _measure(site, "weights-healthy-0001", fault=False)
    _check_layout(result)
    diffs = [s["vllm_logp_diff_mean"] for s in result["steps"]]
    assert all(isinstance(d, float) for d in diffs), diffs  # TRL measured every step
    # that these settings move the weights enough to matter is the stale run's to show
    assert not [d for d in diffs if drift.exceeds(d)], (diffs, drift.BOUND_NATS)
    # the engine started from vLLM's random weights (runtime/rank/generation/engine_weights.py): step 1
    # under the bound says the first push replaced every weight the sampled tokens depend on
    assert any(engine_weights.NOTE in line for line in result["engine_lines"]), result["engine_lines"]
    # and vLLM's own account of that push: every engine parameter named as filled
    assert any("first weight push filled all" in line for line in result["engine_lines"]), \
        result["engine_lines"]


@needs_gpu
def test_skipped_weight_sync_breaks_the_bound_and_status_flags_it(site: Path) -> None:
    result = _measure(site, "weights-stale-0001", fault=True)
    _check_layout(result)
    assert any(FAULT in note for note in result["notes"] or []), result["notes"]
    diffs = [s["vllm_logp_diff_mean"] for s in result["steps"]]
    assert not drift.exceeds(diffs[0]), diffs  # step 1: both sides still hold the initial weights
    assert any(drift.exceeds(d) for d in diffs[1:]), (diffs, drift.BOUND_NATS)
    proc = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", "status", "--json",
                           result["run_dir"]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["drift"].startswith("vLLM drift"), proc.stdout


@needs_gpu
@pytest.mark.parametrize("fault", [False, True], ids=["healthy", "stale"])
def test_lora_merged_weights_reach_vllm(site: Path, fault: bool) -> None:
    """LoRA (#14): TRL merges the adapters into the base before each push; healthy, every step's
    difference stays under the bound; with the push skipped (the engine keeps the base model),
    the trained adapters break it from step 2."""
    result = _measure(site, f"weights-lora-{'stale' if fault else 'healthy'}-0001", fault, lora=True)
    assert result["phase"] == "done" and result["peft"]["r"] == 16, result
    assert [s["step"] for s in result["steps"]] == list(range(1, STEPS + 1))
    diffs = [s["vllm_logp_diff_mean"] for s in result["steps"]]
    assert all(isinstance(d, float) for d in diffs), diffs
    if fault:
        assert not drift.exceeds(diffs[0]) and any(drift.exceeds(d) for d in diffs[1:]), diffs
    else:
        assert not [d for d in diffs if drift.exceeds(d)], (diffs, drift.BOUND_NATS)
        # from random weights (engine_weights.py): the merged push covers the whole model
        assert any(engine_weights.NOTE in line for line in result["engine_lines"]), result

