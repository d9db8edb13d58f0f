"""7B with LoRA on one GPU: periodic checkpoints, a SIGUSR2 stop, a resume with a cold and then
a warm compile cache, and an adapter equal to an uninterrupted run's (issue #29).

Marked ``gpu`` (one GPU; on a two-GPU machine the site names one, so the rank takes GPU 0).
One test per device call where the 10-minute limit needs it, in this order, with
``HPC_GRPO_RESULTS`` and ``HPC_GRPO_WORK`` kept in /tmp between calls on the warm machine:

- ``-k lora_reference``: ``hpc-grpo submit`` of ``builtin:qwen2-7b`` with ``use_peft``, STEPS
  steps, a checkpoint every step, uninterrupted (the model is built first: about 85 s).
- ``-k lora_second`` (session 32, not run yet): the reference's run record again, uninterrupted,
  through the node task with the caches the reference filled: the control of this loan. On the
  7B full-parameter series (test_resume_7b.py) such a second run equalled the stopped-and-resumed
  one at every step while the cold reference did not.
- ``-k lora_stop_and_resume``: the reference's run record in a new directory through the node
  task (as Slurm's ``--signal B:USR2`` reaches it): SIGUSR2 once step 1 is logged (caches
  warm; the rank stops after step 2); resume with empty vLLM/inductor/triton caches and SIGUSR2
  again once its first step (3) is logged (stops after 4); resume with the warm caches to the
  end (5-6). Every step's reward and loss, and the final adapter tensor for
  tensor, must equal the reference's. Restart to first new step, cold against warm (#29: warm
  at most half of cold is the goal, reported, not asserted: one round).

What "equal" can mean here was measured (2 x H200, 2026-11-26, docs/benchmarks.md "session 29"):
two uninterrupted runs of the same code on two loans of the machine are not bit-equal (step 1
loss 0.0553308 against 0.0553285, rewards apart from step 2), so a bit-equal adapter after six
steps is not a property of this stack. The resume is held to what it changes: steps 1-3 (the first
attempt's two and the first after the cold-cache resume) have the reference's rewards exactly and
their loss within LOSS_RTOL (the two uninterrupted runs were 4.3e-5 apart at step 1; the resume,
before runtime/rank/lora_sync.py stopped TRL's bf16 merge/unmerge from moving the base, 3.5e-2
at its first step; after it 3.3e-6). Later steps and the final adapter are reported, not held
against the reference; where ``-k lora_second`` ran on the same loan, every step and the final
adapter must equal that second run's bit for bit.
The reference's final checkpoint is what ``tests/gpu/test_export_gpu.py -k lora`` exports.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.test_checkpoint_resume import (
    _attempt,
    _cli,
    _cold_caches,
    _copy_of,
    _metrics,
    _node_env,
    _work,
)
from tests.gpu.test_gpu import _site, machine, needs_gpu
from tests.gpu.test_multinode import _save, _saved
from tests.gpu.test_resume_7b import _checkpoint

pytestmark = pytest.mark.gpu

STEPS = 6  # room after the cold resume's stop: a 7B LoRA step takes about a second
SETS = {"max_steps": STEPS, "learning_rate": 1e-4, "per_device_train_batch_size": 8,
        "num_generations": 8, "max_completion_length": 64, "save_steps": 1, "use_peft": "true"}
KEYS = ("step", "reward_mean", "reward_std", "loss")
LOSS_RTOL = 1e-4


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


@needs_gpu
def test_lora_stop_and_resume_equal_the_uninterrupted_run() -> None:
    ref, run_dir = _copy_of("7b-lora-resume-reference", "lora7-interrupted", "lora_reference")
    env = _node_env()
    attempts = [{"cache": "warm", **_attempt(run_dir, env, stop_after=1)}]
    cold_env, cold = _cold_caches(env)
    attempts.append({"cache": "cold", **_attempt(run_dir, cold_env, stop_after=1)})
    attempts.append({"cache": "warm", **_attempt(run_dir, env, stop_after=None)})
    shutil.rmtree(cold, ignore_errors=True)
    rows = _metrics(run_dir)
    reference_adapter = _final_adapter(Path(ref["run_dir"]))
    adapter = adapter_difference(reference_adapter, _final_adapter(run_dir))
    cold_s, warm_s = attempts[1]["first_new_step_s"], attempts[2]["first_new_step_s"]
    steps = [{k: r.get(k) for k in KEYS} for r in rows]
    reference = [{k: r.get(k) for k in KEYS} for r in ref["steps"]]
    result = {"run_dir": str(run_dir), "attempts": attempts, "steps": steps,
              "rows": rows,  # every metric: vLLM's log-probability drift among them
              "reference": reference,
              "adapter": adapter, "restart_first_new_step_s": {"cold": cold_s, "warm": warm_s},
              "warm_over_cold": round(warm_s / cold_s, 3) if cold_s > 0 else None,
              "checkpoint": _checkpoint(run_dir),
              "restarts": [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()]
              if (run_dir / "restarts.jsonl").exists() else []}
    second = _saved("7b-lora-resume-second")  # this loan's own uninterrupted run, if it ran
    against: dict[str, Any] = {}
    if second:
        against = adapter_difference(_final_adapter(Path(second["run_dir"])), _final_adapter(run_dir))
        result.update(second=second["steps"], adapter_against_second=against)
    _save("7b-lora-resume-resumed", result)
    assert [a["phase"] for a in attempts] == ["interrupted", "interrupted", "done"], attempts
    assert attempts[2]["first_new_step_s"] > 0, attempts  # the warm resume had steps left
    assert adapter["tensors"] > 0 and not adapter["only_one"], adapter
    held = 3  # steps 1-2 (the first attempt), 3 (the first after the cold-cache resume)
    for ours, theirs in zip(steps[:held], reference[:held], strict=True):
        assert ours["step"] == theirs["step"] and ours["reward_mean"] == theirs["reward_mean"], (
            ours, theirs)
        assert abs(ours["loss"] - theirs["loss"]) <= LOSS_RTOL * abs(theirs["loss"]) + 1e-7, (
            ours, theirs)
    if second:  # same loan: only the stops and the resumes (one on cold caches) differ
        assert steps == second["steps"], (steps, second["steps"])
        assert against["unequal"] == 0, against
