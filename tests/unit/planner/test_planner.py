"""The memory/topology planner: catalogue, published layouts, fit and monotonicity properties,
override and batch-rule errors. Pure arithmetic, so the whole file runs in about a second."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from functools import cache
from math import isclose
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.planner import (
    MemoryPlan,
    ModelArch,
    PlanRequest,
    arch_from_config,
    catalogue_names,
    check_batch_rules,
    lookup_model,
    plan_memory,
)
from hpc_grpo.rundir.shapes import SHAPES
from tests.paths import PACKAGE, RESULTS
from tests.unit.planner.planner_helpers import request

CHOICES = {"tensor_parallel_size", "zero_stage", "offload_optimizer", "offload_params",
           "gradient_checkpointing", "vllm_gpu_memory_utilization", "enable_sleep_mode",
           "max_num_seqs", "vllm_max_model_length"}

# Qwen/Qwen2.5-7B config.json, as published.
QWEN25_7B_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
    "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 152064,
}
QWEN3_8B_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128,
    "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 151936,
}


# --- catalogue ---------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "published"), [
    ("Qwen2.5-0.5B", 0.49e9), ("Qwen2.5-1.5B", 1.54e9), ("Qwen2.5-7B", 7.61e9),
    ("Qwen2.5-72B", 72.7e9), ("Qwen2.5-Math-72B", 72.7e9), ("Llama-3.1-8B", 8.03e9),
    ("Llama-3.1-70B", 70.6e9), ("Llama-3.3-70B-Instruct", 70.6e9), ("Qwen3-0.6B", 0.6e9),
    ("Qwen3-8B", 8.2e9), ("Qwen3-32B", 32.8e9),
])
def test_catalogue_param_counts_match_published_sizes(model: str, published: float) -> None:
    arch = lookup_model(model)
    assert arch is not None
    assert abs(arch.num_params - published) / published < 0.05


@pytest.mark.parametrize("model", [
    *(f"Qwen/Qwen2.5-{s}" for s in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B")),
    *(f"Qwen/Qwen2.5-Math-{s}" for s in ("1.5B", "7B", "72B")),
    "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.3-70B-Instruct",
    *(f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")),
])
def test_catalogue_lists_the_required_models(model: str) -> None:
    assert model in catalogue_names()
    arch = lookup_model(model)
    assert arch is not None and arch.name == model.split("/")[1]
    assert arch.num_attention_heads % arch.num_kv_heads == 0


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-Math-72B", "Qwen2.5-Math-72B",
                                  "qwen/qwen2.5-math-72b", " QWEN2.5-MATH-72B "])
def test_lookup_accepts_hub_id_bare_name_any_case(name: str) -> None:
    arch = lookup_model(name)
    assert arch is not None and arch.name == "Qwen2.5-Math-72B"
    assert arch.max_position_embeddings == 4096


@pytest.mark.parametrize("name", ["Qwen/Qwen9-1B", "someone/Qwen2.5-7B", "gpt2", ""])
def test_lookup_returns_none_when_unknown(name: str) -> None:
    assert lookup_model(name) is None


def test_lookup_keeps_instruct_and_renamed_names() -> None:
    instruct = lookup_model("Qwen/Qwen2.5-7B-Instruct")
    base = lookup_model("Qwen/Qwen2.5-7B")
    assert instruct is not None and base is not None
    assert instruct.name == "Qwen2.5-7B-Instruct" and instruct.max_position_embeddings == 32768
    assert instruct.num_params == base.num_params
    renamed = lookup_model("meta-llama/Meta-Llama-3.1-8B")
    assert renamed is not None and renamed.name == "Llama-3.1-8B"


# --- arch_from_config --------------------------------------------------------------------

def test_arch_from_qwen2_config_matches_the_catalogue() -> None:
    arch = arch_from_config(QWEN25_7B_CONFIG, "Qwen2.5-7B")
    assert arch == lookup_model("Qwen/Qwen2.5-7B")
    assert (arch.num_kv_heads, arch.dim_per_head, arch.qkv_bias) == (4, 128, True)


def test_arch_from_qwen3_config_reads_head_dim_and_qk_norm() -> None:
    arch = arch_from_config(QWEN3_8B_CONFIG, "Qwen3-8B")
    assert arch == lookup_model("Qwen3-8B")
    assert arch.qk_norm and not arch.qkv_bias


def test_arch_from_config_defaults_kv_heads_and_reads_text_config() -> None:
    cfg = {k: v for k, v in QWEN3_8B_CONFIG.items() if k != "num_key_value_heads"}
    arch = arch_from_config({"model_type": "wrapper", "text_config": cfg}, "mm")
    assert arch.num_kv_heads == arch.num_attention_heads == 32


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_size": None}, "lacks hidden_size"),
    ({"num_hidden_layers": None, "vocab_size": None}, "lacks num_hidden_layers, vocab_size"),
    ({"num_attention_heads": "28"}, "expected a positive integer"),
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
    ({"num_experts": 64}, "mixture-of-experts"),
])
def test_arch_from_config_refuses_bad_configs(change: dict[str, Any], message: str) -> None:
    cfg = {**QWEN25_7B_CONFIG, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(UserError, match=message) as err:
        arch_from_config(cfg, "bad")
    assert err.value.field == "config.json"


# --- published layouts ---------------------------------------------------------------------

@pytest.mark.parametrize(("completion", "batch", "accumulation"), [
    (2048, 8, 1), (3584, 4, 1), (4096, 4, 1), (1024, 8, 4), (2048, 8, 4), (4096, 4, 4),
])
def test_qwen_math_72b_on_four_h100_nodes(completion: int, batch: int,
                                         accumulation: int) -> None:
    """HF's vLLM-colocate study (TRL 0.18): TP 8, ZeRO-3 + CPU optimizer offload, sleep mode."""
    plan = plan_memory(request("Qwen/Qwen2.5-Math-72B", nodes=4, cpu_memory_gib_per_node=1024.0,
                             completion_length=completion, per_device_train_batch_size=batch,
                             gradient_accumulation_steps=accumulation))
    assert (plan.tensor_parallel_size, plan.zero_stage) == (8, 3)
    assert plan.offload_optimizer and not plan.offload_params
    assert plan.enable_sleep_mode
    assert plan.max_num_seqs == batch * 8 * accumulation
    assert plan.peak_gib <= 80


@pytest.mark.parametrize(("model", "zero"), [("Qwen/Qwen2.5-1.5B", 2), ("Qwen/Qwen2.5-7B", 2)])
def test_small_models_on_one_h100_node_need_no_offload(model: str, zero: int) -> None:
    plan = plan_memory(request(model))
    assert plan.tensor_parallel_size == 1
    assert plan.zero_stage == zero
    assert not plan.offload_optimizer and not plan.offload_params


def test_tp_below_the_largest_keeps_vllm_within_half_the_gpu() -> None:
    """On H200s TP 2 would fit with sleep mode, but vLLM would take 0.55 of every GPU."""
    plan = plan_memory(request("Qwen/Qwen2.5-72B", nodes=4, gpu_memory_gib=141.0,
                             per_device_train_batch_size=2))
    assert plan.tensor_parallel_size == 4 and plan.vllm_gpu_memory_utilization <= 0.5
    assert "at TP 2" in plan.reason("tensor_parallel_size")
    assert "above 0.5" in plan.reason("tensor_parallel_size")


def test_72b_on_one_node_of_four_40gib_gpus_is_refused_with_the_smallest_change() -> None:
    req = request("Qwen2.5-Math-72B", gpus_per_node=4, gpu_memory_gib=40.0,
                  cpu_memory_gib_per_node=256.0)
    with pytest.raises(UserError, match="does not fit on 1 node of 4 × 40 GiB") as err:
        plan_memory(req)
    assert "vLLM" in err.value.message  # the TP-4 shard alone nearly fills a 40 GiB GPU
    # 4 x 80 GiB nodes would need optimizer offload, whose host memory (planner/memory/host.py:
    # pinned buffers, 8 GiB a rank) 256 GiB nodes hold only from about 9 nodes on: fewer GPU-GiB
    # in 8 x 141 GiB nodes, without offload
    found = re.search(r"(\d+) nodes of (\d+) × (\d+) GiB GPUs", err.value.hint)
    assert found and found.group(0) == "2 nodes of 8 × 141 GiB GPUs", err.value.hint
    nodes, per_node, size = (int(x) for x in found.groups())
    fixed = replace(req, gpu_memory_gib=float(size), nodes=nodes, gpus_per_node=per_node)
    assert plan_memory(fixed).peak_gib <= size


PUBLISHED_72B = dict(nodes=4, completion_length=2048, cpu_memory_gib_per_node=1024.0)


@pytest.mark.parametrize(("change", "hint"), [
    ({"completion_length": 4096}, "per_device_train_batch_size=7"),
    ({"lora": True}, "full fine-tuning"),
])
def test_impossible_requests_name_single_changes(change: dict[str, Any], hint: str) -> None:
    values: dict[str, Any] = {**PUBLISHED_72B, **change}
    req = request("Qwen2.5-Math-72B", **values)
    with pytest.raises(UserError) as err:
        plan_memory(req)
    assert hint in err.value.hint


def test_cpu_memory_shortfall_names_nodes_and_cpu_memory() -> None:
    with pytest.raises(UserError, match="CPU memory per node") as err:
        plan_memory(request("Llama-3.1-70B"))
    assert "at least 2 nodes" in err.value.hint and "GiB of CPU memory" in err.value.hint


# --- properties over a grid ----------------------------------------------------------------

GRID_MODELS = ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-14B",
               "Qwen/Qwen2.5-Math-72B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
               "Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B")
GPU_SIZES = (40.0, 80.0, 141.0)


@cache
def grid_plan(model: str, nodes: int, gpu: float) -> MemoryPlan | None:
    try:
        return plan_memory(request(model, nodes=nodes, gpu_memory_gib=gpu,
                                 cpu_memory_gib_per_node=512.0, per_device_train_batch_size=4))
    except UserError as err:
        assert err.hint, (model, nodes, gpu)
        return None


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("model", GRID_MODELS)
def test_every_returned_plan_fits_its_gpu(model: str, nodes: int) -> None:
    for gpu in GPU_SIZES:
        plan = grid_plan(model, nodes, gpu)
        if plan is None:
            continue
        items = dict(plan.breakdown)
        assert plan.peak_gib <= gpu
        assert all(value >= 0 for value in items.values())
        assert items["total during training"] <= gpu
        assert items["total during generation"] <= gpu
        assert set(dict(plan.reasons)) == CHOICES
        assert 0.1 <= plan.vllm_gpu_memory_utilization <= 0.9
        assert 8 % plan.tensor_parallel_size == 0
        json.dumps(plan.to_dict())


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("model", GRID_MODELS)
def test_more_gpu_memory_never_needs_larger_tp_or_more_offload(model: str, nodes: int) -> None:
    plans = [grid_plan(model, nodes, gpu) for gpu in GPU_SIZES]
    for small, big in zip(plans, plans[1:], strict=False):
        if small is None:
            continue
        assert big is not None, "a fitting request stopped fitting with more memory"
        assert big.tensor_parallel_size <= small.tensor_parallel_size
        assert big.offload_optimizer <= small.offload_optimizer
        assert big.offload_params <= small.offload_params


def test_the_grid_exercises_every_outcome() -> None:
    plans = [grid_plan(m, n, g) for m in GRID_MODELS for n in (1, 2, 4) for g in GPU_SIZES]
    found = [p for p in plans if p is not None]
    assert None in plans
    assert {p.tensor_parallel_size for p in found} >= {1, 8}
    assert {p.zero_stage for p in found} == {2, 3}
    assert {p.offload_optimizer for p in found} == {True, False}
    assert {p.enable_sleep_mode for p in found} == {True, False}


def test_vllm_utilization_is_need_plus_margin_rounded_up() -> None:
    plan = plan_memory(request("Qwen/Qwen2.5-7B"))
    need = plan.gib("vLLM weights per TP shard") + plan.gib("KV cache")
    raw = need / 80 + 0.05
    assert plan.vllm_gpu_memory_utilization >= raw - 1e-9
    assert plan.vllm_gpu_memory_utilization - 0.05 < raw
    assert isclose(plan.vllm_gpu_memory_utilization * 20, round(plan.vllm_gpu_memory_utilization
                                                                * 20))


def test_sleep_mode_off_keeps_vllm_resident_during_training() -> None:
    plan = plan_memory(request("Qwen/Qwen2.5-1.5B"))
    assert not plan.enable_sleep_mode
    budget = plan.vllm_gpu_memory_utilization * 80
    assert plan.gib("total during training") >= budget + plan.gib("activations")


def test_steps_per_generation_defaults_to_accumulation() -> None:
    plan = plan_memory(request("Qwen/Qwen2.5-1.5B", gradient_accumulation_steps=4))
    assert plan.max_num_seqs == 8 * plan.tensor_parallel_size * 4
    other = plan_memory(request("Qwen/Qwen2.5-1.5B", gradient_accumulation_steps=4,
                              steps_per_generation=2))
    assert other.max_num_seqs == 8 * other.tensor_parallel_size * 2


def test_context_caps_vllm_length_and_long_prompts_are_refused() -> None:
    plan = plan_memory(request("Qwen/Qwen2.5-Math-7B", completion_length=4096))
    assert plan.vllm_max_model_length == 4096
    assert "stop at 3584" in plan.reason("vllm_max_model_length")
    with pytest.raises(UserError) as err:
        plan_memory(request("Qwen/Qwen2.5-Math-7B", prompt_length=4096))
    assert err.value.field == "max_prompt_length"


def test_lora_keeps_zero_2_and_beta_adds_a_reference_model() -> None:
    lora = plan_memory(request("Qwen/Qwen2.5-7B", lora=True))
    assert lora.zero_stage == 2 and lora.gib("optimizer states") < 1
    with_ref = plan_memory(request("Qwen/Qwen2.5-7B", beta=0.04))
    assert with_ref.gib("reference model") > 14


# --- overrides -----------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "override", "field", "text"), [
    ("Qwen2.5-7B", {"tensor_parallel_size": 8}, "tensor_parallel_size",
     "does not divide num_attention_heads 28 nor num_kv_heads 4"),
    ("Qwen2.5-7B", {"tensor_parallel_size": 3}, "tensor_parallel_size", "gpus_per_node 8"),
    ("Qwen2.5-Math-72B", {"tensor_parallel_size": 2, **PUBLISHED_72B}, "tensor_parallel_size",
     "would choose 8"),
    ("Qwen2.5-Math-72B", {"offload_optimizer": False, **PUBLISHED_72B}, "offload_optimizer",
     "would choose True"),
    ("Qwen2.5-Math-72B", {"enable_sleep_mode": False, **PUBLISHED_72B}, "enable_sleep_mode",
     "would choose True"),
    ("Qwen2.5-Math-72B", {"vllm_gpu_memory_utilization": 0.2, **PUBLISHED_72B},
     "vllm_gpu_memory_utilization", "would choose 0.35"),
    ("Qwen2.5-7B", {"vllm_gpu_memory_utilization": 0.9}, "vllm_gpu_memory_utilization",
     "generation peaks"),
    ("Qwen2.5-7B", {"vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization",
     "not in (0, 1]"),
    ("Qwen2.5-7B", {"zero_stage": 1}, "zero_stage", "not supported"),
    ("Qwen2.5-7B", {"zero_stage": 0, "offload_optimizer": True}, "offload_optimizer", "ZeRO"),
])
def test_override_errors_name_the_override(model: str, override: dict[str, Any], field: str,
                                           text: str) -> None:
    with pytest.raises(UserError) as err:
        plan_memory(request(model, **override))
    assert err.value.field == field
    assert text in err.value.one_line()


def test_fitting_overrides_are_kept_and_explained() -> None:
    plan = plan_memory(request("Qwen/Qwen2.5-7B", tensor_parallel_size=4, zero_stage=3,
                             offload_optimizer=True, enable_sleep_mode=True,
                             vllm_gpu_memory_utilization=0.5))
    assert (plan.tensor_parallel_size, plan.zero_stage, plan.offload_optimizer) == (4, 3, True)
    assert plan.enable_sleep_mode and plan.vllm_gpu_memory_utilization == 0.5
    for choice in ("tensor_parallel_size", "zero_stage", "offload_optimizer",
                   "enable_sleep_mode", "vllm_gpu_memory_utilization"):
        assert "set by you" in plan.reason(choice)


# --- batch rules ---------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "field", "hint"), [
    (dict(per_device_train_batch_size=4, num_generations=5, world_size=3), "num_generations",
     "num_generations=4 or 6 (divides 12), or per_device_train_batch_size=5"),
    (dict(per_device_train_batch_size=2, num_generations=8, world_size=3,
          steps_per_generation=2), "num_generations", "per_device_train_batch_size=4"),
    (dict(per_device_train_batch_size=3, num_generations=16, world_size=2,
          gradient_accumulation_steps=2), "num_generations", "num_generations=12"),
    (dict(per_device_train_batch_size=8, num_generations=1, world_size=8), "num_generations",
     "num_generations=2"),
    (dict(per_device_train_batch_size=8, num_generations=8, world_size=8, prompt_length=512,
          completion_length=4096, vllm_max_model_length=4096), "vllm_max_model_length",
     "vllm_max_model_length=4608 or max_completion_length=3584"),
    (dict(per_device_train_batch_size=0, num_generations=8, world_size=8),
     "per_device_train_batch_size", ""),
])
def test_batch_rule_errors_suggest_the_nearest_valid_value(kwargs: dict[str, Any], field: str,
                                                           hint: str) -> None:
    with pytest.raises(UserError) as err:
        check_batch_rules(**kwargs)
    assert err.value.field == field
    assert hint in err.value.hint


@pytest.mark.parametrize("kwargs", [
    dict(per_device_train_batch_size=8, num_generations=8, world_size=1),
    dict(per_device_train_batch_size=1, num_generations=8, world_size=8),
    dict(per_device_train_batch_size=2, num_generations=6, world_size=3, steps_per_generation=1),
    dict(per_device_train_batch_size=4, num_generations=8, world_size=32, prompt_length=512,
         completion_length=3584, vllm_max_model_length=4096),
])
def test_valid_batches_pass(kwargs: dict[str, Any]) -> None:
    check_batch_rules(**kwargs)


def test_make_plan_applies_the_batch_rules() -> None:
    with pytest.raises(UserError) as err:
        plan_memory(request("Qwen/Qwen2.5-0.5B", gpus_per_node=3, per_device_train_batch_size=4,
                          num_generations=5))
    assert err.value.field == "num_generations"


# --- purity --------------------------------------------------------------------------------

ALLOWED_IMPORTS = {"__future__", "collections.abc", "dataclasses", "functools", "math", "typing"}


@pytest.mark.parametrize("module", sorted(
    (PACKAGE / "planner").rglob("*.py")),
    ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_planner_modules_are_pure_and_small(module: Path) -> None:
    tree = ast.parse(module.read_text())
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            assert name in ALLOWED_IMPORTS or name.startswith("hpc_grpo."), name
    assert len(module.read_text().splitlines()) < 250


def test_model_arch_is_frozen() -> None:
    arch = lookup_model("Qwen2.5-0.5B")
    assert isinstance(arch, ModelArch)
    with pytest.raises(AttributeError):
        arch.num_params = 1  # type: ignore[misc]


def test_single_process_trains_without_deepspeed() -> None:
    """One GPU: nothing to shard, so the plan matches bare TRL (no DeepSpeed engine)."""
    arch = lookup_model("Qwen2.5-0.5B")
    assert arch is not None
    plan = plan_memory(PlanRequest(arch=arch, nodes=1, gpus_per_node=1, gpu_memory_gib=80,
                                 cpu_memory_gib_per_node=128, prompt_length=64,
                                 completion_length=256, per_device_train_batch_size=32,
                                 num_generations=8))
    assert plan.zero_stage == 0
    assert dict(plan.reasons)["zero_stage"].startswith("0:")
    # no DeepSpeed: fp32 weights as TRL loads them (their own master copy), fp32 grads, Adam m, v
    params = arch.num_params / 2**30
    assert plan.gib("training weights") == pytest.approx(4 * params, abs=0.01)
    assert plan.gib("optimizer states") == pytest.approx(8 * params, abs=0.01)
    sharded = plan_memory(request("Qwen2.5-0.5B", gpus_per_node=2, zero_stage=2))
    assert sharded.gib("training weights") == pytest.approx(2 * params, abs=0.01)  # bf16 + fp32 master
    assert sharded.gib("optimizer states") == pytest.approx(12 * params / 2, abs=0.01)


def test_recomputation_saving_matches_the_gpu_measurement() -> None:
    """The planner's activations with and without gradient checkpointing, against two runs of
    one GPU job that differed only in that (docs/results, 2 x H200): the rise of torch's
    allocated peak is what turning recomputation off costs."""
    saved = RESULTS / "2026-11-23-bench-two-16-steps.json"
    runs = json.loads(saved.read_text())
    measured = (runs["no_grad_ckpt"]["torch_peaks_gib"]["torch_alloc_peak_gib"]
                - runs["default_plan"]["torch_peaks_gib"]["torch_alloc_peak_gib"])
    shape = SHAPES["qwen2-0.5b"]
    arch = arch_from_config({
        "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers, "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads, "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "tie_word_embeddings": True}, "qwen2-0.5b")
    req = PlanRequest(arch=arch, nodes=1, gpus_per_node=2, gpu_memory_gib=140.0,
                      cpu_memory_gib_per_node=100.0, prompt_length=32, completion_length=256,
                      per_device_train_batch_size=32, num_generations=8, zero_stage=0)
    with_gc = plan_memory(req).gib("activations")
    without = plan_memory(replace(req, gradient_checkpointing=False)).gib("activations")
    assert abs((without - with_gc) - measured) <= 0.1 * measured, (without - with_gc, measured)
