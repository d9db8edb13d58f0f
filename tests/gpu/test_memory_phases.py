"""The plan's GPU memory per phase against NVML's peak in that phase (issue #15), one GPU.

Marked ``gpu`` (skipped without CUDA); the 7B shape needs an H200 (the plan's layout holds
fp32 weights, gradients and Adam state: about 100 GiB). Each rank samples NVML's used memory
every 50 ms and files each sample under the phase TRL is in (runtime/rank/observe/phases.py): inside
``sync_weights`` and ``vLLM.generate`` the engine is awake ("generation"), elsewhere it sleeps
("training"). The plan's "total during training" and "total during generation", less its
fragmentation reserve, must each be within 10 % of the measured peak of that phase.

Run on the lent machine (docs/gpu.md) with ``HPC_GRPO_RESULTS`` and ``HPC_GRPO_WORK`` set, one
shape per device call (``-k 1.5b``, then ``-k 7b``). The 7B run's checkpoint (74 GiB) cannot fit
the machine's 64 GiB disk, which submit refuses; this test turns that check off (the free space
reads as unknown) so that the run trains, and the final save is skipped by the rank's own
free-space check (runtime/rank/checkpoints/folders.py), as it would be on a full disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.checkpoint_resume_helpers import _metrics, _work
from tests.gpu.gpu_helpers import _site, needs_gpu
from tests.gpu.multinode_helpers import _save

pytestmark = pytest.mark.gpu

SHAPES = {"1.5b": "builtin:qwen2-1.5b", "7b": "builtin:qwen2-7b"}
SETS = {"max_steps": 4, "learning_rate": 1e-5, "per_device_train_batch_size": 8,
        "num_generations": 8, "max_completion_length": 64, "save_steps": 1000,
        "save_total_limit": 1, "vllm_enable_sleep_mode": "true"}
# The CLI with the free-space probe answering "unknown": the plan then checks no disk.
NO_DISK_CHECK = ("import sys; from hpc_grpo.preflight import inputs; "
                 "inputs.free_space = lambda root: (None, ''); "
                 "from hpc_grpo.cli import main; sys.exit(main())")


def _submit(shape: str) -> Path:
    work = _work(f"mem-{shape}")
    shutil.rmtree(work / "runs" / f"mem-{shape}", ignore_errors=True)  # a rerun: a used id
    site = _site(work, 1)
    env_home = {"HPC_GRPO_HOME": str(_work() / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", NO_DISK_CHECK, "submit", "--site", str(site), "--model", SHAPES[shape],
         "--run-id", f"mem-{shape}", "--wait", *(f"--set={k}={v}" for k, v in SETS.items())],
        capture_output=True, text=True, timeout=560, env={**os.environ, **env_home})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work / "runs" / f"mem-{shape}"


def compare(record: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Planned (without the reserve) against measured, per phase, in GiB."""
    breakdown = dict(record["memory_plan"]["breakdown_gib"])
    reserve = breakdown["fragmentation reserve"]
    measured = rows[-1]["gpu_mem_peak_by_phase_gib"]  # peaks over the whole run
    out: dict[str, Any] = {"reserve_gib": reserve}
    for phase in ("training", "generation"):
        planned = round(breakdown[f"total during {phase}"] - reserve, 2)
        out[phase] = {"planned_gib": planned, "measured_gib": measured.get(phase),
                      "ratio": round(planned / measured[phase], 3) if measured.get(phase) else None}
    return out


@needs_gpu
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_phase_peak_against_the_plan(shape: str) -> None:
    run_dir = _submit(shape)
    record = json.loads((run_dir / "run.json").read_text())
    rows = _metrics(run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    result = {"shape": shape, "sets": SETS, "memory_plan": record["memory_plan"],
              "deepspeed": record["deepspeed"], "gpu_mem_train_begin": state.get("gpu_mem_train_begin"),
              "checkpoint_skipped": state.get("checkpoint_skipped"),
              "steps": [{k: r.get(k) for k in ("step", "gpu_mem_peak_gib", "gpu_mem_peak_by_phase_gib",
                                                "torch_alloc_peak_gib", "phases_s", "step_time")}
                        for r in rows],
              "phases": compare(record, rows)}
    _save(f"memory-phases-{shape}", result)
    shutil.rmtree(_work() / "home" / "models", ignore_errors=True)  # the 7B's 27 GB
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    for phase in ("training", "generation"):
        row = result["phases"][phase]
        assert row["measured_gib"], result["phases"]
        assert 0.9 <= row["ratio"] <= 1.1, result["phases"]


# (shape, ranks): ranks > 1 use that many GPUs of this machine. One 1.5B run keeps its
# checkpoint (DeepSpeed shards only: no gathered model file under offload) for the export test
# (tests/gpu/test_export_gpu.py -k zero3): the two-rank one on a machine of two GPUs or more,
# the one-rank one on a one-GPU machine (one kept checkpoint, not two, beside a 7B's 87 GiB);
# the others delete theirs.
HOST_CASES = [("1.5b", 1), ("1.5b", 2), ("7b", 1), ("7b", 2)]
KEEPS_SHAPE = "1.5b"  # ZeRO-3 + offload: about 20 GiB a checkpoint
# 1.5B with 2 ranks looked missed (61.0 GiB against 44.5) while the RSS sum counted 66 forked
# compile workers (25 GiB); the node lost 36.4 and the refitted plan says 36.5 (host.py)


@needs_gpu
@pytest.mark.parametrize(("shape", "ranks"), HOST_CASES, ids=[f"{s}-{r}rank" for s, r in HOST_CASES])
def test_host_memory_with_optimizer_offload_against_the_plan(shape: str, ranks: int) -> None:
    """ZeRO-3 + optimizer offload: the plan's "CPU memory per node" plus its save's host memory
    (0 here: no gathered model file under offload) against the peak proportional set size of
    the whole process tree (test, launcher, node task, torchrun, ranks with their engines and
    compile workers; each page once, HostPeak), sampled every 2 s, within 10 %
    (planner/memory/host.py; tests/unit/planner/test_host_memory.py holds the saved runs).
    ``-k "offload and 1.5b-2rank"`` etc.; CPU Adam compiles on first use."""
    from tests.gpu.checkpoint_resume_helpers import HostPeak
    from tests.gpu.gpu_helpers import _gpus

    if _gpus() < ranks:
        pytest.skip(f"needs {ranks} CUDA GPUs")
    name = f"mem-offload-{shape}-{ranks}"
    work = _work(name)
    shutil.rmtree(work / "runs" / name, ignore_errors=True)  # a rerun: submit refuses a used id
    site = _site(work, ranks)
    sets = {**SETS, "max_steps": 3}
    peak = HostPeak()
    proc = subprocess.run(
        [sys.executable, "-c", NO_DISK_CHECK, "submit", "--site", str(site), "--model",
         SHAPES[shape], "--zero-stage", "3", "--set=offload_optimizer=true", "--run-id", name,
         "--wait", *(f"--set={k}={v}" for k, v in sets.items())],
        capture_output=True, text=True, timeout=560,
        env={**os.environ, "HPC_GRPO_HOME": str(_work() / "home")})
    rss = peak.stop()
    host = peak.pss_gib() or rss  # each page once (HostPeak's docstring)
    run_dir = work / "runs" / name
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    planned = dict(record["memory_plan"]["breakdown_gib"]).get("CPU memory per node")
    save = (record.get("checkpoint") or {}).get("save_host_gib", 0.0)
    total = round(planned + save, 2) if planned else None
    result = {"shape": shape, "ranks": ranks, "run_dir": str(run_dir),
              "planned_host_gib": planned, "planned_save_host_gib": save,
              "measured_host_pss_peak_gib": host, "measured_host_rss_peak_gib": rss,
              "host_peak_detail": peak.detail(),
              "ratio": round(total / host, 3) if total else None,
              "memory_plan": record["memory_plan"], "deepspeed": record["deepspeed"],
              "state": json.loads((run_dir / "state.json").read_text()),
              "steps": [{k: r.get(k) for k in ("step", "gpu_mem_peak_by_phase_gib", "step_time",
                                                "host_mem_gib")}
                        for r in _metrics(run_dir)]}
    _save(f"memory-offload-{shape}" + (f"-{ranks}ranks" if ranks > 1 else ""), result)
    if (shape, ranks) != (KEEPS_SHAPE, min(_gpus(), 2)):
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    assert planned and record["deepspeed"]["offload_optimizer"], record["deepspeed"]
    assert 0.9 <= result["ratio"] <= 1.1, result
