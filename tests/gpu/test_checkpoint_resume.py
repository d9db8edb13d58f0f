"""Checkpoints that fit, and a SIGUSR2 mid-run resumed exactly (issue #15), on one GPU.

Marked ``gpu`` (skipped without CUDA). Run on the lent machine (docs/gpu.md), one test per
device call, in this order, with ``HPC_GRPO_RESULTS`` and ``HPC_GRPO_WORK`` (a folder kept
between calls, e.g. /tmp/ckpt) set:

- ``-k seven_b``: the 7B shape's plan against this machine's disk: a full-parameter
  checkpoint (12 B/param at least) cannot fit 64 GiB, so there submit refuses with the numbers;
  on a 128 GiB disk one fits. LoRA fits either way. The site is written from this machine's GPU
  and host memory (test_gpu.machine), so the same command passes on H100 and H200 kinds.
- ``-k reference``: an uninterrupted 1.5B run through ``hpc-grpo submit`` (compile cache cold),
  its checkpoint measured against the plan's size, NVML and host RSS peaks recorded.
- ``-k usr2``: the same run record in a new directory through the node task; SIGUSR2 to the node
  task only (as Slurm's ``--signal`` sends it) after step 1, resume with an empty compile cache;
  SIGUSR2 again, resume with the shared warm one; every step's reward and loss must equal the
  reference's. Time from restart to first new step, cold vs warm.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.gpu.checkpoint_resume_helpers import (
    GIB,
    HostPeak,
    _attempt,
    _cli,
    _cold_caches,
    _copy_of,
    _folder_bytes,
    _metrics,
    _node_env,
    _work,
)
from tests.gpu.gpu_helpers import _site, needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu

STEPS = 6
SETS = {"max_steps": STEPS, "learning_rate": 1e-5, "per_device_train_batch_size": 8,
        "num_generations": 8, "max_completion_length": 64, "save_steps": 1000,
        "save_total_limit": 1, "vllm_enable_sleep_mode": "true"}


@needs_gpu
def test_seven_b_checkpoint_against_the_disk() -> None:
    """On a disk too small for one full-parameter checkpoint (64 GiB) submit refuses with the
    numbers; on a larger one (128 GiB) the plan says how many saves fit. Either way LoRA fits.
    The plan needs no model files (built-in shapes are planned from their table); submit, when
    it runs, builds the 7B model, which is deleted afterwards."""
    site = _site(_work("site7"), 1)
    common = ["--site", str(site), "--model", "builtin:qwen2-7b", "--run-id", "seven-b",
              *(f"--set={k}={v}" for k, v in SETS.items())]
    plans = {}
    for name, extra in (("full", []), ("lora", ["--set=use_peft=true"])):
        proc = _cli("plan", *common[:4], *extra, *common[6:], "--json")
        assert proc.returncode == 0, proc.stderr
        plans[name] = json.loads(proc.stdout)
    free = shutil.disk_usage(_work()).free
    one_fits = plans["full"]["checkpoint"]["one_gib"] <= free / GIB
    refused = None if one_fits else _cli("submit", *common)  # plans, refuses before any job
    shutil.rmtree(_work() / "home" / "models" / "qwen2-7b", ignore_errors=True)
    result = {"submit_exit": refused.returncode if refused else None,
              "submit_stderr": refused.stderr.strip()[-600:] if refused else "",
              "free_gib": round(free / GIB, 1),
              "full": {k: plans["full"][k] for k in ("checkpoint", "deepspeed", "warnings")},
              "lora": {k: plans["lora"][k] for k in ("checkpoint", "deepspeed", "warnings")},
              "memory_plan_full": plans["full"]["memory_plan"]}
    _save("ckpt-7b-plan", result)
    warned = " ".join(plans["full"]["warnings"])
    if refused is not None:
        assert refused.returncode == 2 and "checkpoints do not fit" in refused.stderr, \
            refused.stderr
    else:
        assert "checkpoints do not fit" not in warned, warned
    assert plans["lora"]["checkpoint"]["peak_disk_gib"] < result["free_gib"]


@needs_gpu
def test_reference_run_and_its_checkpoint() -> None:
    site = _site(_work("site"), 1)
    peak = HostPeak()
    started = time.time()
    proc = _cli("submit", "--site", str(site), "--model", "builtin:qwen2-1.5b", "--run-id",
                "reference", "--wait", *(f"--set={k}={v}" for k, v in SETS.items()))
    host = peak.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = _work() / "site" / "runs" / "reference"
    record = json.loads((run_dir / "run.json").read_text())
    ckpt = run_dir / "checkpoints" / f"checkpoint-{STEPS}"
    measured = _folder_bytes(ckpt)
    rows = _metrics(run_dir)
    result = {"run_dir": str(run_dir), "wall_s": round(time.time() - started, 1),
              "host_rss_peak_gib": host, "host_pss_peak_gib": peak.pss_gib(),
              "checkpoint_bytes_planned": record["checkpoint_bytes"],
              "checkpoint_bytes_measured": measured,
              "checkpoint_files": {p.name: p.stat().st_size for p in ckpt.rglob("*") if p.is_file()},
              "memory_plan": record["memory_plan"], "deepspeed": record["deepspeed"],
              "state": json.loads((run_dir / "state.json").read_text()), "steps": rows}
    _save("ckpt-reference", result)
    shutil.rmtree(run_dir / "checkpoints")  # the disk is for the interrupted run
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert abs(measured - record["checkpoint_bytes"]) <= 0.05 * measured, result


@needs_gpu
def test_usr2_then_resume_is_exact() -> None:
    ref, run_dir = _copy_of("ckpt-reference", "interrupted", "reference")
    env = _node_env()
    attempts = [_attempt(run_dir, env, stop_after=1)]  # warm cache (the reference filled it)
    cold_env, cold = _cold_caches(env)
    attempts.append({"cache": "cold", **_attempt(run_dir, cold_env, stop_after=1)})
    attempts.append({"cache": "warm", **_attempt(run_dir, env, stop_after=None)})
    rows, ref_rows = _metrics(run_dir), ref["steps"]
    keys = ("step", "reward_mean", "reward_std", "loss")
    result = {"attempts": attempts, "steps": [{k: r.get(k) for k in keys} for r in rows],
              "reference": [{k: r.get(k) for k in keys} for r in ref_rows],
              "restarts": [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()]
              if (run_dir / "restarts.jsonl").exists() else []}
    _save("ckpt-usr2-resume", result)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # 18 GB each: the next test's disk
    shutil.rmtree(cold, ignore_errors=True)
    assert [a["phase"] for a in attempts] == ["interrupted", "interrupted", "done"], attempts
    assert result["steps"] == result["reference"], result
