"""The planner's host memory per node against every saved peak RSS of a fresh run (issue #29).

Each saved run (docs/results) measured the peak RSS of its whole process tree on its one node.
The plan's number for it: planner/memory/host.py's CPU memory per node plus the save's host
memory on rank 0's node (planner/checkpoint_size.py; every one of these runs saved once). Held to
10 %. Where the run had optimizer offload, the plan's own "CPU memory per node" line is used (it
exists only with offload). Evidence: 1.5B and 7B with offload, 1 rank; 0.5B and 1.5B without,
1 rank; 7B without, 2 ranks on one node; 1.5B with offload and 2 ranks on one node, which the
model misses (planned 44.5 GiB, measured 61.0 twice on 2 x H200: a strict xfail until the
mechanism is found). Not saved: 7B with offload and 2 ranks a node.
Resumed attempts (which read the checkpoint into CPU memory) are not what the plan counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.planner import PlanRequest, plan_memory
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.checkpoint_size import CheckpointRequest, size_checkpoint
from hpc_grpo.planner.memory import host
from hpc_grpo.planner.memory.host import host_gib

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
GIB = float(2**30)

# (saved file, keys to its peak RSS, shape, ranks on the node, ZeRO stage, optimizer offload)
RUNS = [
    ("2026-11-24-memory-offload-1.5b-h200.json", ("measured_host_rss_peak_gib",), "qwen2-1.5b",
     1, 3, True),
    ("2026-11-24-ckpt-1.5b-usr2-resume-h200.json", ("attempts", 0, "host_rss_peak_gib"),
     "qwen2-1.5b", 1, 0, False),
    ("2026-11-24-ckpt-1.5b-reference-h200.json", ("host_rss_peak_gib",), "qwen2-1.5b", 1, 0,
     False),
    ("2026-11-24-generation-buffer-resume-h100.json", ("attempts", 0, "host_rss_peak_gib"),
     "qwen2-0.5b", 1, 0, False),
    ("2026-11-25-7b-resume-stop-h100x2.json", ("attempt", "host_rss_peak_gib"), "qwen2-7b", 2, 3,
     False),
    ("2026-11-26-memory-offload-7b-h200x2.json", ("measured_host_rss_peak_gib",), "qwen2-7b", 1, 3,
     True),
]
MISSED = pytest.param(
    "2026-11-26-memory-offload-1.5b-2ranks-h200x2.json", ("measured_host_rss_peak_gib",),
    "qwen2-1.5b", 2, 3, True, marks=pytest.mark.xfail(strict=True, reason=(
        "optimizer offload with 2 ranks a node: 16.5 GiB (8.3 a rank) above the model, in two "
        "runs; DeepSpeed 0.19's per-rank CPU buffers as host.py counts them do not explain it")))


def _measured(name: str, keys: tuple[Any, ...]) -> float:
    value: Any = json.loads((RESULTS / name).read_text())
    for key in keys:
        value = value[key]
    return float(value)


def _request(shape: str, ranks: int, zero: int, offload: bool) -> PlanRequest:
    arch = builtin_arch(shape)
    assert arch is not None
    return PlanRequest(arch=arch, nodes=1, gpus_per_node=ranks, gpu_memory_gib=140.0,
                       cpu_memory_gib_per_node=250.0, prompt_length=32, completion_length=64,
                       per_device_train_batch_size=8, num_generations=8, zero_stage=zero,
                       offload_optimizer=offload, enable_sleep_mode=True,
                       tensor_parallel_size=ranks)


def planned_node_gib(shape: str, ranks: int, zero: int, offload: bool) -> float:
    """What the plan says the node holds at its peak: training's host memory plus the save's."""
    req = _request(shape, ranks, zero, offload)
    if offload:
        plan = plan_memory(req)
        assert (plan.zero_stage, plan.offload_optimizer) == (zero, True)
        training = plan.gib("CPU memory per node")
    else:
        training = host_gib(req, zero, False, False)
    save = size_checkpoint(CheckpointRequest(
        num_params=req.arch.num_params, trainable_params=req.trainable_params, zero_stage=zero,
        offload_optimizer=offload, lora=False, device="cuda", world_size=ranks,
        save_total_limit=1, weight_bytes=4 if zero == 0 else 2))
    return training + save.host_bytes / GIB


@pytest.mark.parametrize(("name", "keys", "shape", "ranks", "zero", "offload"), [*RUNS, MISSED])
def test_host_memory_within_ten_percent_of_the_saved_peak_rss(
        name: str, keys: tuple[Any, ...], shape: str, ranks: int, zero: int, offload: bool) -> None:
    measured = _measured(name, keys)
    planned = planned_node_gib(shape, ranks, zero, offload)
    assert abs(planned - measured) <= 0.10 * measured, (name, round(planned, 2), measured)


def test_the_offload_plan_was_low_before_and_is_close_now() -> None:
    """The saved run's own plan said 24.28 GiB (16 B/param + 4 GiB a rank); the rebuilt plan
    is within 5 % of the 34.78 measured."""
    saved = json.loads((RESULTS / RUNS[0][0]).read_text())
    assert saved["planned_host_gib"] == 24.28
    planned = planned_node_gib("qwen2-1.5b", 1, 3, True)
    assert abs(planned / saved["measured_host_rss_peak_gib"] - 1) < 0.05, planned


@pytest.mark.parametrize(("constant", "value"), [
    ("RANK_PROCESS_GIB", 4.0), ("RANK_PROCESS_GIB", 10.0), ("LOAD_SHARE", 0.0),
    ("LOAD_SHARE", 1.0), ("offloaded_bytes", lambda zero, p: 16.0 * p)])
def test_a_perturbed_model_fails_some_saved_run(monkeypatch: pytest.MonkeyPatch, constant: str,
                                                value: Any) -> None:
    """The check above can fail: the old 4 GiB a rank, a load share of 0 or 1, or the old
    16 B/param of offloaded state (no second gradient buffer, no rounding) each put a saved
    run outside 10 %. Without the power-of-two rounding alone the offload run is -9 %: inside,
    so the rounding is DeepSpeed's and torch's code read, not something this run proves."""
    monkeypatch.setattr(host, constant, value)
    worst = max(abs(planned_node_gib(*run[2:]) / _measured(*run[:2]) - 1) for run in RUNS)
    assert worst > 0.10, (constant, worst)


def test_pinned_buffers_round_up_to_powers_of_two() -> None:
    assert host.pinned(5.07 * GIB) == 8 * GIB
    assert host.pinned(4 * GIB) == 4 * GIB
    assert host.pinned(0) == 0.0
    # 1.5B ZeRO-3, one rank: 16 B/p (20.3 GiB) plus pinned rounding: 4 + 2 GiB of fp32 gradient
    # sub-groups (3.7 + 1.3) and 4 GiB for the bf16 flat buffer (2.5)
    p = 1_360_672_256
    assert host.offloaded_bytes(3, p) / GIB == pytest.approx(12 * p / GIB + 6 + 4)
