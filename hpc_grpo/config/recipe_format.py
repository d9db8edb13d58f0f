"""Recipes as users already have them: the flat YAML of ``trl grpo --config`` and open-r1's grpo.py.

Those files mix TRL's ``ScriptArguments``, ``ModelConfig`` and ``GRPOConfig`` with open-r1's
``GRPOScriptArguments`` and a few keys for other tools (hub upload, evaluation, accelerate).
``translate`` turns such a mapping into hpc-grpo's names and sorts every other key into one
class, each with its reason (docs/recipe.md, "From a TRL or open-r1 recipe"):

* renamed: TRL/open-r1 names of job settings (``model_name_or_path`` -> ``model``, ...);
* claims: plan-owned keys (``bf16``, ``use_vllm``, ``vllm_device``, ``num_processes``, ...),
  accepted when they agree with the plan and refused when they contradict it (``check_claims``,
  which needs the site);
* ignored with a warning: keys that do not change the trained weights but belong to a step
  hpc-grpo does not run (hub upload, evaluation, open-r1's callbacks and W&B names, output_dir);
* only TRL's default: options whose other values would change training in a way hpc-grpo does
  not carry to the ranks (DoRA, 8-bit loading, a chat template override, ...): refused unless
  the value is TRL's default.

Reward names of open-r1 (``accuracy``) and of ``trl grpo`` (``accuracy_reward``, dotted import
paths) map onto ``builtin:NAME`` and ``module:function``. Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hpc_grpo.errors import UserError, did_you_mean

# TRL / open-r1 names of job settings (JobSpec fields) and GRPOConfig fields.
RENAMED = {
    "model_name_or_path": "model",
    "torch_dtype": "dtype",  # TRL < 0.20 ModelConfig; `dtype` since
    "dataset_name": "dataset",
    "dataset_train_split": "dataset_split",
    "dataset_prompt_column": "prompt_column",  # open-r1 GRPOScriptArguments
    "vllm_tensor_parallel_size": "tensor_parallel_size",
    "warmup_ratio": "warmup_steps",  # transformers 5: a float below 1 is a ratio of the steps
}
# open-r1 reward names -> the built-in reward hpc-grpo runs for them (runtime/rank/data/rewards.py).
OPEN_R1_REWARDS = {
    "accuracy": "builtin:accuracy",
    "format": "builtin:format",
    "tag_count": "builtin:tag_count",
    "length": "builtin:length_penalty",
}
# `trl grpo` registry names with the same reward built in.
TRL_REWARDS = {"accuracy_reward": "builtin:accuracy"}
# open-r1 rewards hpc-grpo does not have, with the keyword keys open-r1 feeds them.
UNSUPPORTED_REWARDS: dict[str, tuple[str, ...]] = {
    "reasoning_steps": (),
    "cosine": ("cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
               "cosine_max_value_correct", "cosine_max_len"),
    "repetition_penalty": ("repetition_n_grams", "repetition_max_penalty"),
    "code": ("parallel_code_exec_per_proc", "code_provider", "e2b_router_url",
             "morph_router_url", "enforce_same_language"),
    "binary_code": (),
    "ioi_code": ("code_eval_test_batch_size", "ioi_provider"),
    "cf_code": ("code_eval_scoring_mode",),
    "code_format": ("code_language",),
    "soft_overlong_punishment": ("max_completion_len", "soft_punish_cache"),
    "reasoning_accuracy_reward": (),  # trl grpo's
    "think_format_reward": (),
    "get_soft_overlong_punishment": (),
}
REWARD_KEYWORDS = {key: reward for reward, keys in UNSUPPORTED_REWARDS.items() for key in keys}

# Plan-owned keys checked against the site and the plan by check_claims.
CLAIMS = ("bf16", "fp16", "use_vllm", "use_cpu", "vllm_device", "num_processes")

_HUB = "hpc-grpo pushes the checked export of the run's last checkpoint once, at the end " \
       "(push_to_hub, hub_model_id, hub_private_repo), not checkpoints or revisions"
_EVAL = "evaluation is not run by hpc-grpo, which trains on the train split: evaluate a " \
        "checkpoint from the run directory with your evaluation tool (lighteval, open-r1's " \
        "evaluate.py)"
_OUTPUT = "checkpoints and logs go to the run directory (choose where with --output-root)"
_WANDB = "open-r1 exports these as WANDB_* variables: set WANDB_ENTITY / WANDB_PROJECT / " \
         "WANDB_RUN_GROUP in the site profile's env (report_to: wandb passes through)"
_CALLBACKS = "open-r1's callbacks (hub revision pushes, benchmarks) are not run by hpc-grpo"
IGNORED: dict[str, str] = {
    **dict.fromkeys(("output_dir", "overwrite_output_dir", "logging_dir"), _OUTPUT),
    **dict.fromkeys(("hub_always_push", "hub_revision", "hub_token", "hub_model_revision",
                     "push_to_hub_revision", "overwrite_hub_revision",
                     "log_completions_hub_repo"), _HUB),
    **dict.fromkeys(("do_eval", "eval_strategy", "eval_steps", "eval_delay", "eval_on_start",
                     "per_device_eval_batch_size", "eval_accumulation_steps",
                     "num_generations_eval", "dataset_test_split", "benchmarks",
                     "bf16_full_eval", "fp16_full_eval", "eval_do_concat_batches",
                     "eval_use_gather_object", "batch_eval_metrics", "metric_for_best_model",
                     "greater_is_better", "load_best_model_at_end", "include_for_metrics"),
                    _EVAL),
    **dict.fromkeys(("wandb_entity", "wandb_project", "wandb_run_group",
                     "wandb_log_unique_prompts"), _WANDB),
    "callbacks": _CALLBACKS,
}
# Options hpc-grpo runs only at TRL's (or open-r1's) default: (default, why, what instead).
_LORA_ONLY = "hpc-grpo's LoRA is plain LoRA on lora_target_modules"
ONLY_DEFAULT: dict[str, tuple[Any, str]] = {
    "chat_template": (None, "a chat template override changes every prompt: save it as the "
                      "model folder's tokenizer chat_template and give that folder as model"),
    "dataset_configs": (None, "give one configuration as dataset_config"),
    "dataset_mixture": (None, "give one dataset (a file, a saved folder or a hub id); mix "
                        "datasets beforehand"),
    "dataset_streaming": (False, "the nodes read the dataset whole (staged for offline nodes)"),
    "ignore_bias_buffers": (False, "DDP buffer options are the plan's"),
    # transformers would start a resumed epoch's batches over (Trainer._run_epoch's skip): a
    # requeued run would train on them twice, where hpc-grpo resumes exactly
    "ignore_data_skip": (False, "a requeued run resumes exactly where it stopped; with it, "
                         "transformers would train the stopped epoch's first batches again"),
    # transformers' should_save: every node's first rank, not rank 0 alone, would write the same
    # checkpoint files into the one run directory every node sees (and mark it complete)
    "save_on_each_node": (False, "the run directory is one folder every node sees and rank 0 "
                          "writes each checkpoint; a writer per node would collide there"),
    # transformers' _save_checkpoint then writes no optimizer, scheduler or RNG state, and its
    # resume under DeepSpeed finds no global_step folder: a requeued run could not go on from it
    "save_only_model": (False, "a requeued run resumes from its newest checkpoint, which needs "
                        "the optimizer, scheduler and RNG states (transformers cannot resume "
                        "from a model-only one); hpc-grpo export RUN writes the model folder"),
    "gradient_checkpointing_use_reentrant": (False, "use gradient_checkpointing_kwargs: "
                                             "{use_reentrant: true}"),
    "env": (None, "TRL's env: sets variables for the process; put them in the site profile's "
            "env: (the plan sets CUDA_VISIBLE_DEVICES and the rendezvous)"),
    "reward_model_name_or_path": (None, "reward models are not supported: give reward "
                                  "functions in reward_funcs (builtin:NAME or module:function)"),
    "lora_task_type": ("CAUSAL_LM", _LORA_ONLY),
    "lora_target_parameters": (None, _LORA_ONLY),
    "lora_modules_to_save": (None, _LORA_ONLY),
    "use_rslora": (False, _LORA_ONLY),
    "use_dora": (False, _LORA_ONLY),
    "load_in_8bit": (False, "use load_in_4bit (QLoRA) instead"),
    "bnb_4bit_quant_type": ("nf4", "4-bit loading uses NF4"),
    "use_bnb_nested_quant": (False, "4-bit loading uses NF4 without nested quantization"),
    "bnb_4bit_quant_storage": (None, "4-bit loading keeps bitsandbytes' storage type"),
}
# Top-level keys of nested schemas of other frameworks.
FOREIGN = {
    "NeMo-RL": ("policy", "loss_fn", "cluster", "checkpointing", "grpo", "env", "logger"),
    "verl": ("actor_rollout_ref", "algorithm", "trainer", "critic", "reward_model", "data",
             "custom_reward_function"),
}
MAPPING_DOC = "docs/recipe.md#from-nemo-rl-or-verl"


@dataclass
class Translation:
    """A recipe (or --set) in hpc-grpo's names, plus what needs the plan, warnings, problems."""

    values: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[UserError] = field(default_factory=list)


def foreign_schema(values: Mapping[str, Any]) -> UserError | None:
    """A nested recipe of NeMo-RL or verl, refused in one line (nothing else is worth listing)."""
    nested = {key for key, value in values.items() if isinstance(value, dict)}
    for name, markers in FOREIGN.items():
        found = [key for key in markers if key in nested]
        unique = found and found[0] in ("policy", "actor_rollout_ref")
        if len(found) >= 2 or unique:
            shown = ", ".join(f"{key}:" for key in found[:3])
            return UserError(
                f"this recipe is in {name}'s nested format ({shown}); hpc-grpo reads the flat "
                "TRL/open-r1 format (one mapping of TRL GRPOConfig and job keys)",
                field="recipe", hint=f"{MAPPING_DOC} says which flat key each of its keys becomes")
    return None


def reward_spec(name: Any, where: str) -> tuple[str, UserError | None]:
    """A reward as hpc-grpo names it: builtin:NAME or module:function."""
    text = str(name)
    if ":" in text:
        return text, None
    if text in OPEN_R1_REWARDS or text in TRL_REWARDS:
        return OPEN_R1_REWARDS.get(text) or TRL_REWARDS[text], None
    if "." in text:  # trl grpo's dotted import path
        module, _, func = text.rpartition(".")
        return f"{module}:{func}", None
    supported = ", ".join(f"{k} ({v})" for k, v in OPEN_R1_REWARDS.items())
    how = f"built in: {supported}; any other as module:function (e.g. my_rewards:cosine)"
    if text in UNSUPPORTED_REWARDS:
        return text, UserError(f"reward '{text}' is not built into hpc-grpo", field=where,
                               hint=how)
    # suggested only from names taken here: 'soft_format' led to open-r1's 'code_format',
    # which the next try then refused as not built in
    close = did_you_mean(text, [*OPEN_R1_REWARDS, *TRL_REWARDS])
    return text, UserError(f"unknown reward '{text}'", field=where,
                           hint=f"{close}; {how}" if close.startswith("did") else how)


def map_rewards(value: Any, where: str, problems: list[UserError]) -> Any:
    """Every reward name mapped (reward_spec); its problems appended to ``problems``."""
    if not isinstance(value, list | tuple):
        return value  # JobSpec's type check reports it
    names = []
    for item in value:
        name, problem = reward_spec(item, where)
        names.append(name)
        if problem is not None:
            problems.append(problem)
    return names


# Names other tools use for a setting hpc-grpo has under another name: did-you-mean by meaning.
SYNONYMS = {
    "lr": "learning_rate", "epochs": "num_train_epochs", "num_epochs": "num_train_epochs",
    "batch_size": "per_device_train_batch_size", "train_batch_size": "per_device_train_batch_size",
    "per_device_batch_size": "per_device_train_batch_size",
    "max_new_tokens": "max_completion_length", "max_response_length": "max_completion_length",
    "max_prompt_len": "max_prompt_length", "kl_coef": "beta", "kl_coeff": "beta",
    "num_samples": "num_generations", "group_size": "num_generations",
    "model_path": "model", "model_name": "model", "dataset_path": "dataset",
    "prompt_key": "prompt_column", "tp": "tensor_parallel_size", "num_nodes": "nodes",
    "grad_accum_steps": "gradient_accumulation_steps", "rewards": "reward_funcs",
    "reward_functions": "reward_funcs", "lora_rank": "lora_r", "peft": "use_peft",
}


def unknown_key_hint(key: str, known: frozenset[str]) -> str:
    """A suggestion for an unknown recipe key: a known synonym first, then the closest name."""
    if key in SYNONYMS:
        return f"did you mean '{SYNONYMS[key]}'?"
    return did_you_mean(key, known | set(RENAMED) | set(IGNORED) | set(ONLY_DEFAULT))


def _set(out: Translation, origin: dict[str, str], target: str, key: str, value: Any,
         source: str) -> None:
    """Set a target once; two spellings of it (model and model_name_or_path) must agree."""
    if target in out.values and out.values[target] != value:
        out.problems.append(UserError(
            f"'{origin[target]}' and '{key}' both set {target}, to {out.values[target]!r} and "
            f"{value!r}", field=source, hint="keep one of them"))
        return
    out.values[target] = value
    origin[target] = key


def _only_default(key: str, value: Any, source: str, out: Translation) -> None:
    default, why = ONLY_DEFAULT[key]
    if key == "dataset_configs" and isinstance(value, list) and len(value) == 1:
        return  # handled as dataset_config by the caller
    if value != default and not (default is None and value in ([], {})):
        fix = f"; --set {key}={shown(default)}" if source == "recipe" else ""
        out.problems.append(UserError(f"'{key}: {value!r}' is not supported", field=source,
                                      hint=why + fix))


def warmup_ratio_problem(value: Any, source: str) -> UserError | None:
    """warmup_ratio outside [0, 1), refused. Why: it is renamed to transformers 5's warmup_steps
    (RENAMED), which reads a value below 1 as a ratio of the training steps and one of 1 or more
    as a count of steps, so ``warmup_ratio: 1.0`` (all of the run, as a ratio) would warm up for
    one step and ``2`` for two. A value that is not a number is warmup_steps' check's."""
    if not isinstance(value, int | float) or isinstance(value, bool) or 0 <= value < 1:
        return None
    meaning = f" (transformers would read {value} as {int(value)} warmup " \
              f"step{'s' * (int(value) != 1)})" if math.isfinite(value) and value >= 1 else ""
    steps, ratio = ("--set warmup_steps=", "--set warmup_ratio=") if source == "--set" else \
        ("warmup_steps: ", "warmup_ratio: ")
    return UserError(f"must be a ratio of the training steps, at least 0 and below 1, got "
                     f"{value!r}{meaning}", field=f"{source}: warmup_ratio",
                     hint=f"for a number of warmup steps use {steps}N; a ratio is e.g. {ratio}0.1")


def translate(values: Mapping[str, Any], source: str) -> Translation:
    """Rename, sort and check every key; keys that are neither stay in ``values`` as they are."""
    out = Translation()
    origin: dict[str, str] = {}
    listed = {str(r) for r in values.get("reward_funcs") or () if isinstance(r, str)}
    ignored: dict[str, list[str]] = {}
    for key, value in values.items():
        refused = warmup_ratio_problem(value, source) if key == "warmup_ratio" else None
        if refused is not None:
            out.problems.append(refused)
        elif key in RENAMED:
            _set(out, origin, RENAMED[key], key, value, source)
        elif key == "reward_funcs":
            _set(out, origin, key, key, map_rewards(value, f"{source}: reward_funcs",
                                                    out.problems), source)
        elif key in CLAIMS:
            out.claims[key] = value
        elif key in IGNORED:
            ignored.setdefault(IGNORED[key], []).append(key)
        elif key in ONLY_DEFAULT:
            _only_default(key, value, source, out)
            if key == "dataset_configs" and isinstance(value, list) and len(value) == 1:
                _set(out, origin, "dataset_config", key, value[0], source)
        elif key in REWARD_KEYWORDS:
            reward = REWARD_KEYWORDS[key]
            if reward not in listed:  # listed: the reward itself is refused
                ignored.setdefault(f"open-r1 gives them to its '{reward}' reward, which "
                                   "reward_funcs does not list", []).append(key)
        else:
            _set(out, origin, key, key, value, source)
    for reason, keys in ignored.items():
        out.notes.append(f"{source}: {', '.join(keys)} ignored: {reason}")
    return out


def shown(value: Any) -> str:
    """A value as it is typed after ``--set key=`` (YAML: true, null, 0.7, sdpa)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def _fix(key: str, value: Any, source: str, also: str = "") -> str:
    """The hint of a refused claim: the ``--set`` that fixes it without editing the recipe."""
    fix = f"--set {key}={shown(value)}"
    if source == "--set":
        return f"{fix}, or leave {key} out: the plan sets it" + (f"; {also}" if also else "")
    return f"{fix} (or remove {key}: from the recipe)" + (f"; {also}" if also else "")


def check_claims(claims: Mapping[str, Any], *, device: str, vllm_mode: str,
                 world_sizes: Mapping[str, int],
                 sources: Mapping[str, str]) -> tuple[list[UserError], list[str]]:
    """Plan-owned keys: silent when they agree with the plan, refused when not, with the
    ``--set`` that fixes each (a recipe is never edited to run elsewhere: ``--set`` wins over it,
    README "Precedence"). ``claims`` are the recipe's merged with ``--set``'s, ``sources`` says
    where each value came from. Returns the problems and lines for keys the plan dropped as moot
    (``vllm_device`` where no vLLM runs). A null value is no claim: ``--set vllm_device=null``
    takes a recipe's key back. ``world_sizes``: the training processes of each vLLM mode the plan
    may still choose (both under ``auto``); ``num_processes`` must be one of them."""
    gpu = device == "cuda"
    wanted = {"bf16": gpu, "fp16": False, "use_vllm": gpu}
    why = {"bf16": "the plan trains bf16 on GPU sites and fp32 on CPU sites",
           "fp16": "the plan trains bf16 on GPU sites and fp32 on CPU sites",
           "use_vllm": "the plan generates with vLLM on GPU sites; CPU sites have no vLLM"}
    site = "GPU" if gpu else "CPU-only"
    problems = []
    dropped: list[str] = []
    use_vllm = claims.get("use_vllm")
    vllm_runs = gpu if use_vllm is None else bool(use_vllm)
    for key, value in claims.items():
        source = sources.get(key, "recipe")
        where = f"{source}: {key}"
        if value is None:
            continue
        if key in wanted and value != wanted[key]:
            problems.append(UserError(f"{value!r} contradicts the plan ({why[key]}, and this site "
                                      f"is {site})", field=where,
                                      hint=_fix(key, wanted[key], source)))
        elif key == "use_cpu" and value and gpu:
            problems.append(UserError("true contradicts the plan: the device follows the site",
                                      field=where, hint=_fix(key, False, source,
                                                             "or a CPU-only site (--site local)")))
        elif key == "vllm_device" and not vllm_runs:
            dropped.append(f"vllm_device: {shown(value)} dropped ({source}): no vLLM runs "
                           f"(use_vllm is false{'' if gpu else ' on this CPU-only site'})")
        elif key == "vllm_device" and not gpu:
            problems.append(UserError(
                f"{value!r} puts vLLM on its own GPU, but this site is CPU-only", field=where,
                hint="--set use_vllm=false (CPU sites generate without vLLM)"))
        elif key == "vllm_device" and vllm_mode != "server":
            problems.append(UserError(
                f"{value!r} puts vLLM on its own GPU (TRL <= 0.15), but the plan "
                "colocates vLLM in every rank", field=where,
                hint="--vllm-mode server (vllm_server_gpus) for vLLM on dedicated GPUs, or "
                     "--set vllm_device=null to colocate"))
        elif key == "num_processes" and world_sizes and value not in world_sizes.values():
            counts = set(world_sizes.values())
            runs = " or ".join(f"{n} ({'server mode' if mode == 'server' else mode})"
                               for mode, n in world_sizes.items()) if len(counts) > 1 \
                else str(next(iter(counts)))
            first = next(iter(world_sizes.values()))
            how = "nodes x processes per node" if "server" not in world_sizes else \
                "the trainers: vllm serve's GPUs, or its node, train nothing"
            problems.append(UserError(
                f"{value!r}, but the plan runs {runs} training processes ({how})", field=where,
                hint=_fix(key, first, source, "or choose the layout with --nodes and "
                          "--procs-per-node")))
    return problems, dropped
