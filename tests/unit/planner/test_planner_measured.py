"""The planner's GPU memory per phase against NVML's peaks on an H200 (issue #15).

tests/gpu/test_memory_phases.py measured the plan's own layout (ZeRO off, sleep mode) for the
1.5B and 7B shapes and saved the JSON in docs/results; these tests rebuild the same plan here and
hold each phase's total, less the fragmentation reserve, to within 10 % of the measured peak.
Before the correction the plan was 102.6/123.0 GiB (training/generation) for the 7B shape, and
37.3 for the 1.5B's generation: 9 %, 24 % and 18 % off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.planner import PlanRequest, arch_from_config, plan_memory
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.speed.server import plan_server
from hpc_grpo.runtime.models.shapes import SHAPES
from tests.paths import RESULTS

SAVED = {"qwen2-1.5b": "2026-11-24-memory-phases-1.5b-h200.json",
         "qwen2-7b": "2026-11-24-memory-phases-7b-h200.json"}


def _plan(shape_name: str, saved: dict[str, Any]) -> Any:
    shape = SHAPES[shape_name]
    config = {"hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
              "num_hidden_layers": shape.num_hidden_layers,
              "num_attention_heads": shape.num_attention_heads,
              "num_key_value_heads": shape.num_key_value_heads, "vocab_size": shape.vocab_size,
              "max_position_embeddings": shape.max_position_embeddings}
    sets, layout = saved["sets"], saved["memory_plan"]
    weights = dict(layout["breakdown_gib"])["training weights"]
    for tied in (True, False):  # as the written model's config.json says: the weights tell
        arch = arch_from_config({**config, "tie_word_embeddings": tied}, shape_name)
        if abs(4 * arch.num_params / 2**30 - weights) < 0.01:
            break
    else:
        raise AssertionError(f"no {shape_name} arch gives the saved {weights} GiB of weights")
    return plan_memory(PlanRequest(
        arch=arch, nodes=1, gpus_per_node=1, gpu_memory_gib=140.0, cpu_memory_gib_per_node=64.0,
        prompt_length=layout["vllm_max_model_length"] - sets["max_completion_length"],
        completion_length=sets["max_completion_length"],
        per_device_train_batch_size=sets["per_device_train_batch_size"],
        num_generations=sets["num_generations"], enable_sleep_mode=True))


@pytest.mark.parametrize("shape_name", sorted(SAVED))
def test_each_phase_within_ten_percent_of_the_h200_measurement(shape_name: str) -> None:
    saved = json.loads((RESULTS / SAVED[shape_name]).read_text())
    plan = _plan(shape_name, saved)
    assert (plan.zero_stage, plan.enable_sleep_mode) == (0, True)  # the layout that was measured
    reserve = plan.gib("fragmentation reserve")
    measured = saved["steps"][-1]["gpu_mem_peak_by_phase_gib"]
    for phase in ("training", "generation"):
        planned = plan.gib(f"total during {phase}") - reserve
        assert abs(planned - measured[phase]) <= 0.10 * measured[phase], (phase, planned, measured)


LAYOUTS = RESULTS / "2026-11-26-bench-two-1.5b-layouts-h200x2-call1.json"
LAYOUTS_AGAIN = RESULTS / "2026-11-26-bench-two-1.5b-layouts-h200x2-call2.json"


def _colocated(run: dict[str, Any]) -> Any:
    """The saved run's own plan, rebuilt: 1.5B, 2 ranks on one host, 32 × 288 tokens a rank."""
    planned = run["planned"]
    arch = builtin_arch("qwen2-1.5b")
    assert arch is not None
    return plan_memory(PlanRequest(
        arch=arch, nodes=1, gpus_per_node=2, gpu_memory_gib=140.0, cpu_memory_gib_per_node=250.0,
        prompt_length=32, completion_length=256, per_device_train_batch_size=32,
        num_generations=8, zero_stage=planned["zero_stage"],
        gradient_checkpointing=planned["gradient_checkpointing"], enable_sleep_mode=False))


@pytest.mark.parametrize(("saved", "key"), [
    (LAYOUTS, "plan"), (LAYOUTS, "default_plan"), (LAYOUTS, "no_grad_ckpt"),
    (LAYOUTS, "no_grad_ckpt_plan"), (LAYOUTS_AGAIN, "no_grad_ckpt_plan")])
def test_the_2026_11_26_layouts_never_peak_above_the_plan(saved: Path, key: str) -> None:
    """2 x H200, 1.5B, each layout as it ran: the plan's training total (fragmentation reserve
    included), the figure that decides whether a layout fits, is at least NVML's peak, and the
    plan's use without the reserve is within -10 % .. +15 % of it. Before the allocator-cache
    line ZeRO-2 without recomputation was planned at 61.0 GiB against 72.6 measured (-16 %)."""
    run = json.loads(saved.read_text())[key]
    plan = _colocated(run)
    assert plan.gib("activations") == run["planned"]["breakdown_gib"]["activations"]
    total = plan.gib("total during training")
    use = total - plan.gib("fragmentation reserve")
    assert total >= run["peak_gpu_gib"], (total, run["peak_gpu_gib"])
    assert -0.10 <= use / run["peak_gpu_gib"] - 1 <= 0.15, (use, run["peak_gpu_gib"])


def test_server_trainer_plan_against_the_45_step_measurement() -> None:
    """1.5B, one trainer of 64 sequences on an H200 (2026-11-26, 45 steps): the plan's live
    tensors (28.9 GiB: fp32 weights, gradients, Adam, activations with recomputation, the
    lm-head tile, autocast copies) cover torch's allocated peak (22.9 GiB) with at most 30 % to
    spare; its total (45.9 GiB with overhead and reserve) does not cover the reserve torch's
    cache grew to (74.8 GiB), which the plan's warning states instead of counting."""
    run = json.loads((RESULTS / "2026-11-26-server-trainer-memory-45-steps-h200x2.json")
                     .read_text())["server"]
    arch = builtin_arch("qwen2-1.5b")
    assert arch is not None
    plan = plan_server(PlanRequest(
        arch=arch, nodes=1, gpus_per_node=1, gpu_memory_gib=140.0, cpu_memory_gib_per_node=250.0,
        prompt_length=32, completion_length=256, per_device_train_batch_size=64,
        num_generations=8), 1, 0.9, 0)
    trainer = dict(plan.trainer)
    total = trainer["total during training"]
    live = total - trainer["CUDA/NCCL overhead"] - trainer["fragmentation reserve"]
    allocated = run["torch_peaks_gib"]["torch_alloc_peak_gib"]
    assert allocated <= live <= 1.30 * allocated, (live, allocated)
    plateau = run["torch_reserved_per_step_gib"][-1]
    assert run["torch_reserved_per_step_gib"][15:] == [plateau] * 30  # flat from step 16 of 45
    assert total < plateau
    warning = plan.growth_warning()
    assert f"{plateau:.1f} GiB reserved" in warning and f"{allocated:.1f} GiB" in warning
