"""The plan picks the fastest layout that fits (#30): 7B on one H200, slow and fast links against
server mode, and layouts the user forces (planned as given or refused with the number)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.planner import plan_memory
from hpc_grpo.planner.checkpoint_fit import resident_host_gib
from hpc_grpo.planner.memory.search import search
from hpc_grpo.planner.modes import faster_mode
from hpc_grpo.planner.speed.server import plan_server
from tests.unit.planner.speed_choice_helpers import request


def test_7b_on_one_h200_trains_without_zero_in_sleep_mode_not_with_offload() -> None:
    plan = plan_memory(request("qwen2-7b"))
    assert (plan.zero_stage, plan.enable_sleep_mode, plan.offload_optimizer) == (0, True, False)
    assert plan.speed is not None
    offload = [row for row in plan.speed.considered if "offload" in row.layout]
    assert offload and all(row.verdict.startswith("slower") for row in offload)
    assert min(row.step.seconds for row in offload) > 3 * plan.speed.step.seconds


def test_a_users_sleep_mode_changes_the_verdict_on_zero_off() -> None:
    awake = request("qwen2-7b", zero_stage=0, enable_sleep_mode=False)
    with pytest.raises(UserError, match=r"training peaks at 150\.9 GiB"):
        plan_memory(awake)
    plan = plan_memory(replace(awake, enable_sleep_mode=True))
    assert (plan.zero_stage, plan.enable_sleep_mode) == (0, True)
    assert plan.reason("zero_stage") == "0: set by you"


def test_a_forced_layout_that_cannot_fit_is_refused_with_the_number() -> None:
    """Qwen2.5-7B's untied 152k vocabulary: 7.6 B parameters, 18 B each without DeepSpeed."""
    with pytest.raises(UserError, match=r"zero_stage=0 cannot fit: training peaks at 147\.3 GiB"):
        plan_memory(request("Qwen/Qwen2.5-7B", zero_stage=0, enable_sleep_mode=True))


def test_a_forced_slower_layout_is_planned_as_given() -> None:
    plan = plan_memory(request("qwen2-7b", zero_stage=3, offload_optimizer=True))
    assert (plan.zero_stage, plan.offload_optimizer) == (3, True)
    assert plan.speed is not None and plan.speed.step.seconds > 5


def test_offload_is_also_tried_at_the_smaller_tp_and_wins_where_it_is_faster() -> None:
    """7B on 2 x 48 GiB: only optimizer offload fits. The first-fit chain offloads at the largest
    TP; the speed model also tries TP 1, whose engines generate without TP's collectives."""
    req = request("qwen2-7b", gpus_per_node=2, gpu_memory_gib=48.0, completion_length=64)
    first_fit, _ = search(req)
    assert first_fit is not None and (first_fit.layout.tp, first_fit.layout.offload_optimizer) \
        == (2, True)
    plan = plan_memory(req)
    assert (plan.tensor_parallel_size, plan.zero_stage, plan.offload_optimizer) == (1, 3, True)
    assert plan.speed is not None
    rows = {row.layout: row for row in plan.speed.considered}
    two = [row for name, row in rows.items() if name.startswith("TP 2, ZeRO-3, optimizer offload")]
    assert two and all(row.verdict.startswith("slower") for row in two)
    # a TP the user sets keeps the search to it: no TP 1 rows then
    forced = plan_memory(replace(req, tensor_parallel_size=2))
    assert forced.speed is not None and forced.tensor_parallel_size == 2
    assert not [row for row in forced.speed.considered if row.layout.startswith("TP 1")]


TWO_NODES = dict(nodes=2, gpus_per_node=2, gpu_memory_gib=139.0, per_device_train_batch_size=32)


def _modes(inter_gbs: float) -> tuple[str, float, float]:
    colocate = request("qwen2-1.5b", **TWO_NODES, inter_node_gbs=inter_gbs)
    trainers = replace(colocate, gpus_per_node=1)
    mode, _ = faster_mode(colocate, trainers, 1, 0.9, 0)
    speed = plan_memory(colocate).speed
    assert speed is not None
    return mode, speed.step.seconds, plan_server(trainers, 1, 0.9, 0).step.seconds


def test_across_a_slow_link_the_plan_is_never_slower_than_server_mode() -> None:
    """2.68 GB/s: NCCL over sockets between the sandbox's nodes (docs/benchmarks.md 2026-11-23)."""
    mode, colocate_s, server_s = _modes(2.68)
    assert mode == ("server" if server_s < colocate_s else "colocate")
    chosen = server_s if mode == "server" else colocate_s
    assert chosen <= min(colocate_s, server_s)


def test_with_an_infiniband_class_link_the_plan_colocates() -> None:
    mode, colocate_s, server_s = _modes(25.0)
    assert mode == "colocate" and colocate_s < server_s


def test_auto_says_plainly_when_server_mode_does_not_fit() -> None:
    """7B on 2 x 79 GiB: one server-mode trainer cannot hold 7B's training state; the line once
    read "against server mode's the trainer peaks at ..."."""
    colocate = request("qwen2-7b", gpus_per_node=2, gpu_memory_gib=79.0,
                       per_device_train_batch_size=32)
    trainers = replace(colocate, gpus_per_node=1)
    assert not plan_server(trainers, 1, 0.9, 0).fits
    mode, why = faster_mode(colocate, trainers, 1, 0.9, 0)
    assert mode == "colocate"
    assert "against server mode, which does not fit: the trainer peaks at" in why, why
    assert "server mode's the" not in why


def test_server_mode_plans_the_optimizer_offload_it_is_given() -> None:
    """7B, one server-mode trainer on a 79 GiB card: Adam's states on the GPU do not fit; with
    ZeRO-3 and optimizer offload (as the runtime's DeepSpeed block then runs it) they move to
    the node's CPU memory, which is checked in turn; the offload costs step time. The plan once
    ignored the offload and called every such layout too big for the card."""
    trainers = request("qwen2-7b", gpu_memory_gib=79.0, per_device_train_batch_size=64)
    on_gpu = plan_server(replace(trainers, zero_stage=3), 1, 0.9, 3)
    offloaded = plan_server(replace(trainers, zero_stage=3, offload_optimizer=True), 1, 0.9, 3)
    assert "the trainer peaks at" in on_gpu.problem
    assert offloaded.fits, offloaded.problem
    assert dict(offloaded.trainer)["optimizer states"] == 0 and offloaded.host_gib > 100
    assert on_gpu.host_gib == 0
    assert offloaded.step.seconds > on_gpu.step.seconds  # CPU Adam's per-step cost
    small_host = replace(trainers, zero_stage=3, offload_optimizer=True,
                         cpu_memory_gib_per_node=64.0)
    assert "CPU memory per node, above 51 GiB usable" in plan_server(small_host, 1, 0.9, 3).problem


def test_the_save_s_host_check_counts_what_server_mode_s_trainers_offload() -> None:
    trainers = request("qwen2-7b", gpu_memory_gib=79.0, per_device_train_batch_size=64,
                       zero_stage=3, offload_optimizer=True)
    served = plan_server(trainers, 1, 0.9, 3)
    assert resident_host_gib(None, served) == served.host_gib > 100
    assert resident_host_gib(None, None) == 0.0


def test_the_slow_link_measurement_itself_prefers_server_mode() -> None:
    """The measured pair (1.5B, 2 nodes x 1 GPU colocated ZeRO-2 3.47 s against server mode on
    one node 2.28 s): the model predicts server mode faster too."""
    colocate = request("qwen2-1.5b", nodes=2, per_device_train_batch_size=32, inter_node_gbs=2.68)
    speed = plan_memory(replace(colocate, zero_stage=2)).speed
    trainers = replace(colocate, nodes=1, per_device_train_batch_size=64)
    assert speed is not None
    assert plan_server(trainers, 1, 0.9, 0).step.seconds < speed.step.seconds


def test_link_inputs_are_stated_in_the_plan() -> None:
    plan = plan_memory(request("qwen2-1.5b", nodes=2, inter_node_gbs=2.68,
                               link_source="measured by doctor 2026-11-25"))
    assert plan.speed is not None
    assert "2.68 GB/s between nodes (measured by doctor 2026-11-25" in plan.speed.hardware
    assumed = plan_memory(request("qwen2-1.5b")).speed
    assert assumed is not None and "(assumed)" in assumed.hardware
