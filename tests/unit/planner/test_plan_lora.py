"""LoRA through the plan: the recipe's rank and target modules reach the memory model, and the
plan says what LoRA changed."""

from __future__ import annotations

import pytest

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.errors import UserError
from hpc_grpo.planner import lookup_model, plan_memory
from hpc_grpo.planner.job import build_plan
from hpc_grpo.planner.types import ModelRef
from tests.unit.planner.planner_helpers import request


def test_adapter_size_follows_rank_and_targets() -> None:
    arch = lookup_model("Qwen/Qwen2.5-7B")
    assert arch is not None
    h, kv = arch.hidden_size, arch.num_kv_heads * arch.dim_per_head
    # q_proj + v_proj: A (in x r) + B (r x out) per decoder layer
    assert arch.lora_params(8, ("q_proj", "v_proj")) == 8 * ((h + h) + (h + kv)) * arch.num_layers
    assert arch.lora_params(16) == 2 * arch.lora_params(8) == arch.lora_params(16, ("all-linear",))
    assert arch.lora_params(16, ("q_proj",)) < arch.lora_params(16)


def test_plan_shows_what_lora_changes() -> None:
    full = plan_memory(request("Qwen/Qwen2.5-7B"))
    small = plan_memory(request("Qwen/Qwen2.5-7B", lora=True, lora_rank=8,
                              lora_target_modules=("q_proj", "v_proj")))
    big = plan_memory(request("Qwen/Qwen2.5-7B", lora=True, lora_rank=256))
    assert small.gib("optimizer states") < big.gib("optimizer states") < full.gib(
        "optimizer states")
    reason = small.reason("lora")
    assert reason.startswith("r=8 on q_proj, v_proj:") and "less per GPU than full" in reason
    with pytest.raises(KeyError):
        full.reason("lora")
    with pytest.raises(UserError, match="name no linear layer"):
        plan_memory(request("Qwen/Qwen2.5-7B", lora=True, lora_target_modules=("qproj",)))


def test_recipe_peft_keys_reach_the_job_plan() -> None:
    site = find_site("h100-pyxis")
    arch = lookup_model("Qwen/Qwen2.5-7B-Instruct")
    model = ModelRef("Qwen/Qwen2.5-7B-Instruct", local=False, arch=arch)
    spec = build_spec({"model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "use_peft": True,
                       "lora_r": 4, "lora_target_modules": ["q_proj"]}, {}, {}, site)
    plan = build_plan(site, spec, model)
    assert plan.memory is not None and plan.memory.reason("lora").startswith("r=4 on q_proj:")
    record = plan.run_record("r", "/x").to_dict()
    assert record["peft"]["r"] == 4 and record["peft"]["target_modules"] == ["q_proj"]
