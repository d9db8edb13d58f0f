"""The planner's host memory per node against the saved measurements (issue #29).

Two kinds of saved measurement (docs/results):

* Each page once (``CLEAN``): what the node lost over the run (MemTotal - MemAvailable, nothing
  else running) or the process tree's PSS. 1.5B and 7B with ZeRO-3 + optimizer offload, 2 ranks
  on one 2 x H200 node (2026-11-26; the model's per-rank constant is fitted to these two), and
  1.5B and 7B on 1 rank of a 2 x H100 node (2026-11-26, measured after that fit; the 7B one in
  session 32, 122.55 GiB against the plan's 126.43, whose pinned sub-group count was matched to
  the first 7B one-rank run's pinned allocator, not to this node total), and 1.5B on 1 rank of
  a one-H200 machine (session 48, twice, measured on a machine kind this case had not run on, with no
  change to the model). Held within 10 %.
* The first 7B one-rank run on the H100 node, whose sampler was cut off (``RANK_PEAK``): only
  the rank's own peak RSS (VmHWM) is known, a lower bound of the node's count; the plan must lie
  between it and 10 % above it.
* The RSS summed over the process tree (``RSS_SUMS``: every run saved before 2026-11-26). That
  sum counts the image of each forked inductor compile worker (about one per core and rank)
  although the node holds it once: 61.0 GiB summed against 36.4 lost at 1.5B with 2 ranks, on
  the same run. It is an upper bound of what the node held, so the plan is held not to exceed
  it by more than 10 % (it cannot say how far below it may fall).
The plan's number: planner/memory/host.py's CPU memory per node plus the save's host memory on
rank 0's node (planner/checkpoint_size.py; every one of these runs saved once; 0 under offload).
Where the run had optimizer offload, the plan's own "CPU memory per node" line is used (it exists
only with offload). Resumed attempts (which read the checkpoint into CPU memory) are not what the
plan counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hpc_grpo.planner import PlanRequest, plan_memory
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.checkpoint_size import CheckpointRequest, size_checkpoint
from hpc_grpo.planner.memory import host
from hpc_grpo.planner.memory.host import host_gib
from tests.paths import RESULTS

GIB = float(2**30)

NODE = ("host_peak_detail", "node_used_peak_less_start_gib")
# (saved file, keys to its measurement, shape, ranks on the node, ZeRO stage, optimizer offload)
CLEAN = [
    ("2026-11-26-memory-offload-1.5b-2ranks-split-h200x2.json", NODE, "qwen2-1.5b", 2, 3, True),
    ("2026-11-26-memory-offload-7b-2ranks-h200x2.json", NODE, "qwen2-7b", 2, 3, True),
    ("2026-11-26-memory-offload-1.5b-1rank-h100x2.json", NODE, "qwen2-1.5b", 1, 3, True),
    ("2026-11-26-memory-offload-7b-1rank-h100x2.json", NODE, "qwen2-7b", 1, 3, True),
    ("2026-11-29-memory-offload-1.5b-1rank-h200-session48.json", NODE, "qwen2-1.5b", 1, 3, True),
    ("2026-11-29-memory-offload-1.5b-1rank-second-h200-session48.json", NODE, "qwen2-1.5b", 1, 3,
     True),
]
RANK_PEAK = ("2026-11-26-memory-offload-7b-1rank-partial-h100x2.json",
             ("measured_rank_vmhwm_gib",), "qwen2-7b", 1, 3, True)
RSS_SUMS = [
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
    ("2026-11-26-memory-offload-1.5b-2ranks-h200x2.json", ("measured_host_rss_peak_gib",),
     "qwen2-1.5b", 2, 3, True),
    ("2026-11-26-memory-offload-1.5b-2ranks-split-h200x2.json", ("measured_host_rss_peak_gib",),
     "qwen2-1.5b", 2, 3, True),
]


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


@pytest.mark.parametrize(("name", "keys", "shape", "ranks", "zero", "offload"), CLEAN)
def test_host_memory_within_ten_percent_of_the_node_s_own_count(
        name: str, keys: tuple[Any, ...], shape: str, ranks: int, zero: int, offload: bool) -> None:
    measured = _measured(name, keys)
    planned = planned_node_gib(shape, ranks, zero, offload)
    assert abs(planned - measured) <= 0.10 * measured, (name, round(planned, 2), measured)


def test_the_plan_counts_the_sub_groups_of_the_model() -> None:
    """host_gib takes subgroups.py's groups: 7B on one rank, 2 GiB of pinned remainder less
    than the 1e9-and-a-remainder split (what the pinned allocator showed, test_subgroups.py),
    plus the small no-decay group's own 2 MiB block."""
    req = _request("qwen2-7b", 1, 3, True)
    p = req.trainable_params
    split = host.offloaded_bytes(3, p) / GIB
    assert host_gib(req, 3, True, False) == pytest.approx(
        host.RANK_PROCESS_GIB + host.LOAD_SHARE * host.load_bytes(req, 3) / GIB + split - 2.0, abs=0.01)


def test_host_memory_at_or_above_the_rank_s_own_peak() -> None:
    measured = _measured(*RANK_PEAK[:2])
    planned = planned_node_gib(*RANK_PEAK[2:])
    assert measured <= planned <= 1.10 * measured, (round(planned, 2), measured)


@pytest.mark.parametrize(("name", "keys", "shape", "ranks", "zero", "offload"), RSS_SUMS)
def test_host_memory_below_every_saved_rss_sum(
        name: str, keys: tuple[Any, ...], shape: str, ranks: int, zero: int, offload: bool) -> None:
    measured = _measured(name, keys)
    planned = planned_node_gib(shape, ranks, zero, offload)
    assert planned <= 1.10 * measured, (name, round(planned, 2), measured)


def test_the_rss_sum_overcounts_what_the_node_lost() -> None:
    """The same run, two counts: why the RSS sums are bounds only. The ranks' own RSS is close to
    the node's count; the difference is the forked compile workers."""
    run = json.loads((RESULTS / CLEAN[0][0]).read_text())
    detail = run["host_peak_detail"]
    node = detail["node_used_peak_less_start_gib"]
    ranks = sum(p["rss"] for p in detail["processes"] if "rank.train" in p["cmd"])
    workers = sum(p["rss"] for p in detail["processes"] if "compile_worker" in p["cmd"])
    assert run["measured_host_rss_peak_gib"] > 1.5 * node
    assert abs(ranks - node) < 2.0, ranks
    assert workers >= 0.9 * (run["measured_host_rss_peak_gib"] - node), workers


@pytest.mark.parametrize(("constant", "value"), [
    ("RANK_PROCESS_GIB", 8.0), ("RANK_PROCESS_GIB", 1.0), ("LOAD_SHARE", 2.0),
    ("offloaded_bytes", lambda zero, p, groups=None: 16.0 * p), ("pinned", lambda nbytes: 2.0 * nbytes)])
def test_a_perturbed_model_fails_some_clean_run(monkeypatch: pytest.MonkeyPatch, constant: str,
                                                value: Any) -> None:
    """The check above can fail: the 8 GiB a rank fitted on RSS sums, a rank of 1 GiB, twice the
    load share, the old 16 B/param of offloaded state (no second gradient buffer, no rounding),
    or pinned buffers taking twice their size each put a clean run outside 10 %."""
    monkeypatch.setattr(host, constant, value)
    worst = max(abs(planned_node_gib(*run[2:]) / _measured(*run[:2]) - 1) for run in CLEAN)
    assert worst > 0.10, (constant, worst)


def test_pinned_buffers_round_up_to_powers_of_two() -> None:
    assert host.pinned(5.07 * GIB) == 8 * GIB
    assert host.pinned(4 * GIB) == 4 * GIB
    assert host.pinned(0) == 0.0
    # 1.5B ZeRO-3, one rank: 16 B/p (20.3 GiB) plus pinned rounding: 4 + 2 GiB of fp32 gradient
    # sub-groups (3.7 + 1.3) and 4 GiB for the bf16 flat buffer (2.5)
    p = 1_360_672_256
    assert host.offloaded_bytes(3, p) / GIB == pytest.approx(12 * p / GIB + 6 + 4)
