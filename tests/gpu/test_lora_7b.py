"""7B with LoRA on one GPU: periodic checkpoints, SIGUSR2 stops and resumes, an adapter equal
to an uninterrupted run's, and the restart with a cold and a warm compile cache (issue #29).

Marked ``gpu`` (one GPU; on a two-GPU machine the site names one, so the rank takes GPU 0).
One test per device call where the 10-minute limit needs it, in this order, with
``HPC_GRPO_RESULTS`` and ``HPC_GRPO_WORK`` kept in /tmp between calls on the warm machine:

- ``-k lora_reference``: ``hpc-grpo submit`` of ``builtin:qwen2-7b`` with ``use_peft``, STEPS
  steps, a checkpoint every step, uninterrupted (the model is built first: about 85 s). It is
  the first LoRA engine of the loan, so its vLLM graphs compile from empty caches.
- ``-k lora_second``: the reference's run record again, uninterrupted, through the node task
  with the caches the reference filled: the control of this loan (about 95 s).
- ``-k lora_stop_and_resume``: the same record in a new directory through the node task (as
  Slurm's ``--signal B:USR2`` reaches it), all on warm caches: stopped after step 2, resumed
  from checkpoint-2 and stopped after step 4, resumed from checkpoint-4 to the end. Every
  step's reward and loss and every adapter tensor must equal the second run's, bit for bit
  (about 215 s; session 35: passed, all 6 steps and 112 adapter tensors equal).
- ``-k lora_cold_cache``: the same record again: stopped after step 2, resumed with empty
  vLLM/inductor/triton caches and stopped after step 4 (the signal lands after the step being
  run); restart to first new step, cold against the warm restarts above (#29's goal, warm at
  most half of cold, is reported: one round; about 210 s). Steps 1-2 must equal the second
  run's; step 3 follows checkpoint-2 with the engine as close to the trainer as in the second
  run, and where its rewards are the second run's, its loss within LOSS_RTOL (a cold compile
  may pick another kernel variant and generate other completions: session 47).

Why the control is this loan's warm second run and not the reference (measured, 2 x H100,
session 34, docs/benchmarks.md): the second run and the stopped run's first attempt (two GPUs,
warm caches) were bit-equal at steps 1-2; the cold-compiled reference had the same step-1 rewards
but step 1's loss was -0.0402 against 0.0055 and vLLM's log-probability drift differed; after a
resume with cold caches the first step's loss was 3e-6 from the warm run's (rewards equal) and
rewards parted one step later. So a vLLM engine compiled from empty caches is not bit-equal to
one loaded from them, and a resume is exact only against a run on the same caches. The 7B
full-parameter series found the same (test_resume_7b.py: the warm second run equalled the
resumed one at every step, the cold reference did not). On 2 x H200 (session 29) two
uninterrupted runs on two loans were 4.3e-5 apart at step 1. Session 35 (2 x H100) confirmed
the warm chain (every step and adapter tensor equal) and found the two step-1 losses swapped:
its cold reference got 0.0055 and its warm runs -0.0401, so the cache state does not pick the
compiled variant (tests/unit/benchmarks/claims.yaml, session 35's section).
The reference's final checkpoint is what ``tests/gpu/test_export_gpu.py -k lora`` exports.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.checkpoint_resume_helpers import (
    _attempt,
    _cli,
    _cold_caches,
    _copy_of,
    _metrics,
    _node_env,
    _work,
)
from tests.gpu.gpu_helpers import _site, machine, needs_gpu
from tests.gpu.lora_7b_helpers import KEYS, assert_cold_first_step
from tests.gpu.multinode_helpers import _save, _saved
from tests.gpu.resume_7b_helpers import _checkpoint

pytestmark = pytest.mark.gpu

STEPS = 6  # room after the cold resume's stop: a 7B LoRA step takes about a second
SETS = {"max_steps": STEPS, "learning_rate": 1e-4, "per_device_train_batch_size": 8,
        "num_generations": 8, "max_completion_length": 64, "save_steps": 1, "use_peft": "true"}


def _final_adapter(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    folder = run_dir / "checkpoints" / f"checkpoint-{STEPS}"
    return load_file(str(folder / "adapter_model.safetensors"))


def adapter_difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Tensors present in one only, tensors not bit-equal, and the largest |a - b|."""
    names = sorted(set(a) | set(b))
    unequal = [n for n in names if n in a and n in b and not bool((a[n] == b[n]).all())]
    largest = max((float((a[n].float() - b[n].float()).abs().max()) for n in unequal), default=0.0)
    return {"tensors": len(names), "only_one": [n for n in names if (n in a) != (n in b)],
            "unequal": len(unequal), "max_abs_diff": largest}


@needs_gpu
def test_lora_reference() -> None:
    site = _site(_work("lora-site"), 1)
    args = ["--site", str(site), "--model", "builtin:qwen2-7b",
            *(f"--set={k}={v}" for k, v in SETS.items())]
    plan = _cli("plan", *args, "--json")
    assert plan.returncode == 0, plan.stderr
    started = time.time()
    proc = _cli("submit", *args, "--run-id", "lora7", "--wait", timeout=560)
    run_dir = _work() / "lora-site" / "runs" / "lora7"
    rows = _metrics(run_dir)
    gpu, host = machine()
    result = {"run_dir": str(run_dir), "exit": proc.returncode, "wall_s": round(time.time() - started, 1),
              "gpu_gib": round(gpu, 2), "host_gib": round(host, 1), "plan": json.loads(plan.stdout),
              "checkpoint": _checkpoint(run_dir), "steps": rows,
              "state": json.loads((run_dir / "state.json").read_text()),
              "stdout_tail": proc.stdout[-1500:], "stderr_tail": proc.stderr[-1500:]}
    _save("7b-lora-resume-reference", result)
    assert proc.returncode == 0, result["stdout_tail"] + result["stderr_tail"]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert result["checkpoint"]["folder"] == f"checkpoint-{STEPS}", result["checkpoint"]


@needs_gpu
def test_lora_second_uninterrupted_run() -> None:
    _, run_dir = _copy_of("7b-lora-resume-reference", "lora7-second", "lora_reference")
    attempt = _attempt(run_dir, _node_env(), stop_after=None)
    rows = _metrics(run_dir)
    _save("7b-lora-resume-second", {"run_dir": str(run_dir), "attempt": attempt, "rows": rows,
                                    "steps": [{k: r.get(k) for k in KEYS} for r in rows],
                                    "checkpoint": _checkpoint(run_dir)})
    assert attempt["phase"] == "done", attempt
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))


def _steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in KEYS} for r in rows]


@needs_gpu
def test_lora_stop_and_resume_equal_the_uninterrupted_run() -> None:
    """Two SIGUSR2 stops and resumes, all on the warm caches of this loan, against this loan's
    own uninterrupted run (-k lora_second): every step and the final adapter bit-equal."""
    second = _saved("7b-lora-resume-second")
    assert second, "run -k lora_second first (same HPC_GRPO_RESULTS): the control of this loan"
    ref, run_dir = _copy_of("7b-lora-resume-reference", "lora7-interrupted", "lora_reference")
    env = _node_env()
    attempts = [_attempt(run_dir, env, stop_after=1),  # stops after step 2
                _attempt(run_dir, env, stop_after=1),  # resumes from checkpoint-2, stops after 4
                _attempt(run_dir, env, stop_after=None)]  # resumes from checkpoint-4 to the end
    rows = _metrics(run_dir)
    steps = _steps(rows)
    against = adapter_difference(_final_adapter(Path(second["run_dir"])), _final_adapter(run_dir))
    result = {"run_dir": str(run_dir), "attempts": attempts, "steps": steps, "rows": rows,
              "second": second["steps"], "reference": _steps(ref["steps"]),
              "adapter_against_second": against,
              "adapter_against_reference": adapter_difference(
                  _final_adapter(Path(ref["run_dir"])), _final_adapter(run_dir)),
              "warm_restart_first_new_step_s": [a["first_new_step_s"] for a in attempts[1:]],
              "checkpoint": _checkpoint(run_dir)}
    _save("7b-lora-resume-resumed", result)
    assert [a["phase"] for a in attempts] == ["interrupted", "interrupted", "done"], attempts
    assert [a["step"] for a in attempts] == [2, 4, STEPS], attempts
    assert steps == second["steps"], (steps, second["steps"])
    assert against["tensors"] > 0 and not against["only_one"], against
    assert against["unequal"] == 0, against


@needs_gpu
def test_lora_cold_cache_restart() -> None:
    """The restart cost with empty vLLM/inductor/triton caches, and what the cold compile does
    to the numbers. A cold compile picks one of (at least) two kernel variants by timing, and a
    warm cache replays the variant it holds: session 34's first step after a cold restart was
    3e-6 from the warm run's loss, session 35's 3.6e-4 (rewards equal, apart a step later),
    session 47's (one H200) generated other completions at once (step 3's rewards -13.75
    against -12.75), while that loan's cold-compiled reference equalled its warm runs bit for bit.
    So what is held after the cold restart is what does not depend on the variant: steps 1-2
    bit-equal, the resume from checkpoint-2 to step 3 with no step lost, the first weight push
    filling every engine parameter, and the engine agreeing with the trainer at the first new
    step as closely as in the uninterrupted run (vLLM's log-probability gap, which a stale or
    missing adapter would widen). Where the completions are the same, the loss is held to
    LOSS_RTOL. The warm/cold ratio is reported, not asserted (a time, not a behaviour)."""
    second = _saved("7b-lora-resume-second")
    assert second, "run -k lora_second first (same HPC_GRPO_RESULTS): the control of this loan"
    _, run_dir = _copy_of("7b-lora-resume-reference", "lora7-cold", "lora_reference")
    env = _node_env()
    cold_env, cold = _cold_caches(env)
    attempts = [_attempt(run_dir, env, stop_after=1),  # warm, stops after step 2
                _attempt(run_dir, cold_env, stop_after=1)]  # cold caches, from checkpoint-2
    shutil.rmtree(cold, ignore_errors=True)
    rows = _metrics(run_dir)
    steps = _steps(rows)
    warm = _saved("7b-lora-resume-resumed")  # -k lora_stop_and_resume's warm restarts
    if warm and warm.get("second") != second["steps"]:
        warm = None  # from another loan's control: its restarts are not this one's
    warm_times = [t for t in (warm or {}).get("warm_restart_first_new_step_s", []) if t and t > 0]
    warm_s = min(warm_times) if warm_times else None
    cold_s = attempts[1]["first_new_step_s"]
    log = run_dir / "logs" / "rank-0.log"
    pushes = log.read_text(errors="replace").count("first weight push filled all") if log.exists() else 0
    _save("7b-lora-resume-cold", {
        "run_dir": str(run_dir), "attempts": attempts, "steps": steps, "second": second["steps"],
        "logp_gap": [r.get("vllm_logp_diff_mean") for r in rows],
        "second_logp_gap": [r.get("vllm_logp_diff_mean") for r in second.get("rows", [])],
        "first_push_checks": pushes,
        "restart_first_new_step_s": {"cold": cold_s, "warm": warm_s},
        "warm_over_cold": round(warm_s / cold_s, 3) if warm_s and cold_s > 0 else None})
    assert [a["phase"] for a in attempts] == ["interrupted", "interrupted"], attempts
    assert [a["step"] for a in attempts] == [2, 4], attempts
    assert str(attempts[1]["resumed_from"]).endswith("checkpoint-2"), attempts
    assert [s["step"] for s in steps] == [1, 2, 3, 4], steps  # no step lost, none twice
    assert steps[:2] == second["steps"][:2], (steps, second["steps"])  # warm: bit-equal
    assert pushes >= 2, f"{log}: the first weight push check on each attempt ({pushes})"
    assert_cold_first_step(rows[2], second.get("rows") or [])


