"""run.json records the dtype the ranks load in, not the one asked for (issue #58: a CPU run's
model_load.dtype said bfloat16 while the ranks trained float32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.planner import lookup_model
from hpc_grpo.planner.job import build_plan
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.runtime.rank.setup.grpo_args import grpo_kwargs


@pytest.mark.parametrize(("site", "recipe", "recorded"), [
    ("local", {"dtype": "bfloat16"}, "float32"),  # CPU: fp32 weights and Adam states
    ("h100-pyxis", {"dtype": "bfloat16"}, "float32"),  # one GPU, no DeepSpeed: fp32 masters
    ("h100-pyxis", {"dtype": "bfloat16", "pure_bf16": True}, "bfloat16"),
    ("local", {}, ""),  # TRL's default, float32
])
def test_run_json_records_the_dtype_the_ranks_load_in(tmp_path: Path, site: str,
                                                      recipe: dict[str, object],
                                                      recorded: str) -> None:
    profile = find_site(site)
    name = "Qwen/Qwen2.5-0.5B-Instruct"
    model = ModelRef(name, local=False, arch=lookup_model(name))
    spec = build_spec({"model_name_or_path": name, "max_completion_length": 64, **recipe}, {},
                      {"nodes": 1, "procs_per_node": 1} if site != "local" else {}, profile)
    plan = build_plan(profile, spec, model)
    assert plan.deepspeed is None
    record = plan.run_record("r", str(tmp_path))
    assert record.model_load.dtype == recorded
    known = [*record.grpo_config, "model_init_kwargs", "output_dir", "seed", "use_cpu", "bf16",
             "fp16", "use_vllm", "logging_steps", "vllm_mode", "gradient_checkpointing"]
    kwargs, _ = grpo_kwargs(record, tmp_path, known)
    assert (kwargs.get("model_init_kwargs") or {}).get("dtype", "") == recorded  # what they load
