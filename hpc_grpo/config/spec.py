"""The job spec: what to train, where, and with which GRPOConfig fields.

A recipe is one flat YAML mapping, as in open-r1 and TRL examples: keys that name job-spec
fields configure the job, every other key must be a GRPOConfig field of the supported TRL; its
value is checked against TRL's type and range (``config/grpo.py``) and then passes through.
Precedence: command-line flags > ``--set`` > recipe > defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from hpc_grpo.config.grpo import check_values, field_types
from hpc_grpo.config.strict import from_mapping, load_yaml_text
from hpc_grpo.errors import UserError, UserErrors, did_you_mean
from hpc_grpo.runtime.contract import DEFAULT_SEED

# GRPOConfig fields that the plan owns: the user sets them through job-spec fields instead.
PLAN_OWNED = {
    "output_dir": "the run directory holds checkpoints; choose where with --output-root",
    "deepspeed": "set zero_stage / offload_optimizer; the DeepSpeed file is generated",
    "use_vllm": "vLLM is used on GPU sites and cannot run on CPU",
    "use_cpu": "follows the site: CPU-only sites train on CPU",
    "bf16": "bf16 on GPU sites, fp32 on CPU",
    "vllm_server_host": "the server's host comes from the node list",
    "vllm_server_port": "the server's port comes from the profile's port range",
    "vllm_server_base_url": "the server's address comes from the node list",
}
# GRPOConfig names that are job-spec fields under their TRL name.
ALIASES = {
    "vllm_tensor_parallel_size": "tensor_parallel_size",
}


@dataclass(frozen=True)
class JobSpec:
    model: str
    dataset: str = "builtin:digits"
    prompt_column: str = "prompt"
    # Longest prompt in tokens the plan allows for (vLLM's max_model_len = this + completion);
    # TRL 1.16 no longer truncates prompts, so the ranks refuse a dataset with longer ones.
    # 0: the built-in dataset's bound, else 512.
    max_prompt_length: int = 0
    reward_funcs: tuple[str, ...] = ("builtin:length",)
    nodes: int = 1
    procs_per_node: int = 0  # 0: the site's default
    tensor_parallel_size: int = 0  # 0: the planner decides
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_gpus: int = 1
    vllm_gpu_memory_utilization: float = 0.0  # 0: the planner decides
    vllm_enable_sleep_mode: bool | None = None
    zero_stage: int | None = None
    offload_optimizer: bool | None = None
    seed: int = DEFAULT_SEED
    time: str = "01:00:00"
    name: str = ""
    payload: Literal["train", "check"] = "train"
    partition: str = ""
    # How the model loads (TRL/open-r1 ModelConfig names; recipe aliases map onto these).
    model_revision: str = ""
    dtype: str = ""
    attn_implementation: str = ""
    trust_remote_code: bool = False
    # Dataset details beyond its name (TRL ScriptArguments / open-r1 GRPOScriptArguments).
    dataset_config: str = ""
    dataset_split: str = "train"
    solution_column: str = ""
    system_prompt: str = ""
    reward_weights: tuple[float, ...] = ()
    # LoRA / QLoRA (TRL ModelConfig names and defaults).
    use_peft: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: tuple[str, ...] = ()
    load_in_4bit: bool = False
    grpo: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSpec)) - {"grpo"}


def grpo_fields() -> frozenset[str]:
    """GRPOConfig field names of the supported TRL, shipped so the login node needs no trl."""
    return frozenset(field_types())


def parse_set(items: Iterable[str]) -> dict[str, Any]:
    """``--set key=value`` pairs, values read as YAML scalars (``0.01``, ``true``, ``[a, b]``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"'{item}' is not key=value", field="--set", hint="e.g. --set max_steps=50")
        try:
            out[key.strip()] = load_yaml_text(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


def split_keys(values: Mapping[str, Any], source: str,
               problems: list[UserError]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate job-spec keys from GRPOConfig keys; anything else is a typo (added to problems)."""
    spec: dict[str, Any] = {}
    grpo: dict[str, Any] = {}
    known = grpo_fields()
    for key, value in values.items():
        key = ALIASES.get(key, key)
        if key in SPEC_FIELDS:
            spec[key] = value
        elif key in PLAN_OWNED:
            problems.append(UserError(f"'{key}' is set by hpc-grpo", field=f"{source}: {key}",
                                      hint=PLAN_OWNED[key]))
        elif key in known:
            grpo[key] = value
        elif key == "grpo" and isinstance(value, dict):
            nested_spec, nested = split_keys(value, source, problems)
            for name in nested_spec:
                problems.append(UserError(f"'{name}' is a job setting, not a GRPOConfig field",
                                          field=f"{source}: grpo", hint="move it to the top level"))
            grpo.update(nested)
        else:
            problems.append(UserError(
                f"unknown key '{key}': neither a job setting nor a GRPOConfig field",
                field=source, hint=did_you_mean(key, known | SPEC_FIELDS)))
    return spec, grpo


def build_spec(
    recipe: Mapping[str, Any], sets: Mapping[str, Any], flags: Mapping[str, Any]
) -> JobSpec:
    """Merge the three sources with flags winning; flags hold only options the user gave.

    Every unknown key and every bad GRPOConfig value is reported in one UserErrors."""
    problems: list[UserError] = []
    recipe_spec, recipe_grpo = split_keys(recipe, "recipe", problems)
    set_spec, set_grpo = split_keys(sets, "--set", problems)
    merged = {**recipe_spec, **set_spec, **{k: v for k, v in flags.items() if v is not None}}
    sources = {**dict.fromkeys(recipe_grpo, "recipe"), **dict.fromkeys(set_grpo, "--set")}
    merged["grpo"], bad_values = check_values({**recipe_grpo, **set_grpo}, sources)
    problems += bad_values
    spec = None
    if "model" not in merged:
        problems.append(UserError("no model given", field="model",
                                  hint="pass --model or set model: in the recipe"))
    else:
        try:
            spec = from_mapping(JobSpec, merged, "")
        except UserError as err:
            problems.append(err)
    if spec is not None and spec.nodes < 1:
        problems.append(UserError(f"nodes must be at least 1, got {spec.nodes}", field="nodes"))
    if spec is None or problems:
        raise UserErrors(problems) if len(problems) > 1 else problems[0]
    return spec
