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
from hpc_grpo.config.recipe_format import (
    CLAIMS,
    IGNORED,
    ONLY_DEFAULT,
    RENAMED,
    Translation,
    check_claims,
    foreign_schema,
    map_rewards,
    shown,
    translate,
    unknown_key_hint,
)
from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec_checks import spec_problems
from hpc_grpo.config.strict import from_mapping, load_yaml_text
from hpc_grpo.errors import UserError, UserErrors, did_you_mean
from hpc_grpo.rundir.contract import DEFAULT_SEED, world_size

# The dtypes TRL's create_model_from_path loads (its ValueError on every rank otherwise).
DTYPES = ("auto", "bfloat16", "float16", "float32")
# GRPOConfig fields that the plan owns: the user sets them through job-spec fields instead.
# (bf16, use_vllm, use_cpu are checked against the site; output_dir is ignored with a warning:
# config/recipe_format.py.)
PLAN_OWNED = {
    "deepspeed": "set zero_stage / offload_optimizer; the DeepSpeed file is generated",
    "vllm_server_host": "the server's host comes from the node list",
    "vllm_server_port": "the server's port comes from the profile's port range",
    "vllm_server_base_url": "the server's address comes from the node list",
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
    # The fewest nodes an attempt may start on (0: off, every attempt on ``nodes``): the job
    # asks Slurm for --nodes=MIN-MAX, so a requeued job whose nodes are not all free continues
    # on those that are and grows back at the next restart (issue #60; rundir/reshard.py).
    min_nodes: int = 0
    procs_per_node: int = 0  # 0: the site's default
    tensor_parallel_size: int = 0  # 0: the planner decides
    vllm_mode: Literal["colocate", "server", "auto"] = "colocate"  # auto: planner/modes.py
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
    # bf16 weights, gradients and Adam states without DeepSpeed (less memory, less precise);
    # otherwise the ranks keep fp32 master weights whatever dtype says (rank/setup/model_load.py).
    pure_bf16: bool = False
    # Periodic checkpoints written in the background while training goes on: the rank holds
    # the serialized state in host memory until written (runtime/rank/checkpoints/background_save.py).
    async_save: bool = False
    # Dataset details beyond its name (TRL ScriptArguments / open-r1 GRPOScriptArguments).
    dataset_config: str = ""
    dataset_split: str = "train"
    solution_column: str = ""
    system_prompt: str = ""
    reward_weights: tuple[float, ...] = ()
    # Keyword arguments per reward, by the reward's name in reward_funcs: {"builtin:x": {"k": 1}}.
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    # LoRA / QLoRA (TRL ModelConfig names and defaults).
    use_peft: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: tuple[str, ...] = ()
    load_in_4bit: bool = False
    # TRL's hub keys: the checked export of the last checkpoint, pushed after the run (export/hub_step.py).
    push_to_hub: bool = False
    hub_model_id: str = ""
    hub_strategy: str = "end"
    hub_private_repo: bool | None = None
    grpo: dict[str, Any] = field(default_factory=dict)
    # Warnings about recipe keys that were ignored (hub upload, evaluation): shown by the plan,
    # not a setting, not saved in spec.json.
    notes: tuple[str, ...] = ()
    # What the command line changed from the recipe, one line each with the flag or --set that
    # did it: `plan` lists them in one block (not a setting, not saved in spec.json).
    changes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["notes"], out["changes"]
        return out


SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSpec)) - {"grpo", "notes", "changes"}
# The command-line flag of each job key that has one (cli.py JOB_OPTIONS).
FLAGS = {"model": "--model", "dataset": "--dataset", "reward_funcs": "--reward",
         "nodes": "--nodes", "min_nodes": "--min-nodes", "procs_per_node": "--procs-per-node",
         "tensor_parallel_size": "--tp", "vllm_mode": "--vllm-mode", "zero_stage": "--zero-stage",
         "seed": "--seed", "time": "--time", "name": "--name", "partition": "--partition",
         "payload": "--payload"}


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


def split_keys(values: Mapping[str, Any], source: str, problems: list[UserError],
               found: Translation | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate job-spec keys from GRPOConfig keys; anything else is a typo (added to problems).

    TRL/open-r1 names are translated first (recipe_format); its plan-owned claims and warnings
    are collected in ``found``."""
    spec: dict[str, Any] = {}
    grpo: dict[str, Any] = {}
    known = grpo_fields()
    translated = translate(values, source)
    problems += translated.problems
    if found is not None:
        found.claims.update(translated.claims)
        found.notes += translated.notes
    for key, value in translated.values.items():
        if key in SPEC_FIELDS:
            spec[key] = value
        elif key in PLAN_OWNED:
            problems.append(UserError(f"'{key}' is set by hpc-grpo", field=f"{source}: {key}",
                                      hint=PLAN_OWNED[key] + (f" (--set {key}=null drops the "
                                                              "recipe's)" if source == "recipe"
                                                              else "")))
        elif key in known:
            grpo[key] = value
        elif key == "grpo" and isinstance(value, dict):
            nested_spec, nested = split_keys(value, source, problems, found)
            for name in nested_spec:
                problems.append(UserError(f"'{name}' is a job setting, not a GRPOConfig field",
                                          field=f"{source}: grpo", hint="move it to the top level"))
            grpo.update(nested)
        elif not isinstance(key, str):
            # YAML reads an unquoted 1:, 0.5:, true: or null: as a number, bool or null: no
            # setting is named so, and the did-you-mean below compares names only.
            kind = ("null" if key is None else "a boolean" if isinstance(key, bool)
                    else "a number" if isinstance(key, int | float) else type(key).__name__)
            problems.append(UserError(
                f"key {shown(key)} is not a setting name (YAML reads it as {kind})",
                field=source, hint="keys are job settings and GRPOConfig fields, e.g. max_steps"))
        else:
            hint = (unknown_key_hint(key, known | SPEC_FIELDS) if UserErrors.listed(problems)
                    else "")  # not printed: difflib over every name costs ms a key
            problems.append(UserError(
                f"unknown key '{key}': neither a job setting nor a GRPOConfig field",
                field=source, hint=hint))
    return spec, grpo


def server_trainers(nodes: int, gpus_per_node: int, server_gpus: int) -> tuple[int, int]:
    """Server mode's (training nodes, trainer GPUs per node): a server given all of a node's
    GPUs in a job of 2+ nodes takes the last node for itself and the others train on all
    theirs; otherwise every node trains on what the server leaves (planner/topology.py
    server_split, which also refuses what leaves no trainer)."""
    if server_gpus == gpus_per_node and nodes >= 2:
        return nodes - 1, gpus_per_node
    return nodes, gpus_per_node - server_gpus


def _count(value: Any, default: int) -> int:
    """An integer setting for the world-size check; a value of the wrong type is left to
    from_mapping, which reports it as a UserError with the others."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _world_sizes(site: SiteProfile, merged: Mapping[str, Any]) -> dict[str, int]:
    """Training processes the plan may run (planner/topology.py processes), by vLLM mode, for a
    recipe's num_processes: ``auto`` may run either mode (_mode_from_claim then lets the recipe's
    count choose between them)."""
    nodes = _count(merged.get("nodes"), 1)
    colocate = world_size(nodes, _count(merged.get("procs_per_node"), 0)
                          or site.default_procs_per_node)
    mode = merged.get("vllm_mode", "colocate")
    if site.device != "cuda" or mode == "colocate":
        return {"colocate": colocate}
    trainers = server_trainers(nodes, site.gpus_per_node,
                               _count(merged.get("vllm_server_gpus"), 1))
    server = {"server": world_size(*trainers)} if min(trainers) > 0 else {}
    return server if mode == "server" else {"colocate": colocate, **server}


def _mode_from_claim(sizes: Mapping[str, int], claims: Mapping[str, Any]) -> tuple[str, str]:
    """Under ``auto``, the recipe's layout keys choose a mode when only one mode agrees with all
    of them: its ``num_processes`` (an open-r1 recipe's 7 of 8 GPUs is server mode's count) and
    a ``vllm_device`` (vLLM on a GPU of its own, which only server mode is). Otherwise they
    would pass the check and then be ignored, or be refused, when auto picked the other mode.
    ("", "") when they choose nothing; check_claims then judges them against both."""
    if len(sizes) < 2:
        return "", ""
    modes, why = set(sizes), []
    claim = claims.get("num_processes")
    if claim is not None:
        counted = {mode for mode, n in sizes.items() if n == claim}
        modes &= counted
        if len(counted) == 1:
            why.append(f"num_processes {claim} is {min(counted)} mode's training processes")
    if claims.get("vllm_device") is not None and claims.get("use_vllm") is not False:
        modes &= {"server"}
        why.append(f"vllm_device {claims['vllm_device']!r} puts vLLM on a GPU of its own")
    if len(modes) != 1 or not why:
        return "", ""
    (mode,) = modes
    other = next(m for m in sizes if m != mode)
    return mode, (f"vllm_mode: auto -> {mode} ({'; '.join(why)}; {other} runs {sizes[other]} "
                  "training processes)")


def _site_claims(site: SiteProfile, merged: dict[str, Any], claims: Mapping[str, Any],
                 from_set: set[str]) -> tuple[list[UserError], list[str]]:
    """The recipe's plan-owned keys against the site (check_claims), after they chose the mode
    where ``auto`` left it open (_mode_from_claim: ``merged``'s vllm_mode is then set). The
    problems, and the lines for what changed (the mode chosen, keys dropped as moot)."""
    sources = {key: "--set" if key in from_set else "recipe" for key in claims}
    sizes = _world_sizes(site, merged)
    chosen, line = _mode_from_claim(sizes, claims)
    if chosen:
        merged["vllm_mode"] = chosen
        sizes = {chosen: sizes[chosen]}
    wrong, dropped = check_claims(claims, device=site.device,
                                  vllm_mode=merged.get("vllm_mode", "colocate"),
                                  world_sizes=sizes, sources=sources)
    return wrong, [line] * bool(chosen) + dropped


def model_load_problems(site: SiteProfile, spec: JobSpec) -> list[UserError]:
    """How the model loads, against the site's device: what every rank would otherwise raise
    alike after the queue wait (flash-attention on a CPU site, a dtype TRL refuses)."""
    problems = []
    attn = spec.attn_implementation
    if site.device != "cuda" and attn.startswith("flash_attention"):
        problems.append(UserError(f"{attn!r} needs CUDA GPUs (the flash-attn kernels), but site "
                                  f"'{site.name}' is CPU-only", field="attn_implementation",
                                  hint="--set attn_implementation=sdpa"))
    if spec.dtype and spec.dtype not in DTYPES:
        problems.append(UserError(f"{spec.dtype!r} is not a dtype TRL loads", field="dtype",
                                  hint=did_you_mean(spec.dtype, DTYPES)))
    if spec.pure_bf16 and site.device != "cuda":
        problems.append(UserError(f"pure bf16 training needs GPUs: site '{site.name}' is "
                                  "CPU-only and the plan trains fp32 there",
                                  field="pure_bf16", hint="--set pure_bf16=false"))
    elif spec.pure_bf16 and spec.zero_stage:
        problems.append(UserError(f"pure bf16 is DDP's: DeepSpeed ZeRO-{spec.zero_stage} keeps "
                                  "fp32 master weights and Adam states whatever the model's dtype",
                                  field="pure_bf16", hint="--zero-stage 0, or --set pure_bf16=false"))
    if spec.pure_bf16 and spec.dtype not in ("", "auto", "bfloat16"):
        problems.append(UserError(f"pure_bf16 trains bfloat16 weights, but dtype is {spec.dtype!r}",
                                  field="pure_bf16", hint="--set dtype=bfloat16"))
    return problems


def _changes(recipe: Mapping[str, Any], sets: Mapping[str, Any],
             flags: Mapping[str, Any]) -> list[str]:
    """One line per recipe value the command line replaced, naming the flag or --set."""
    out = []
    for key, before in recipe.items():
        if key in flags:
            after, origin = flags[key], FLAGS.get(key, f"--{key}")
        elif key in sets:
            after = sets[key]
            origin = f"--set {key}={shown(after)}"
        else:
            continue
        both_lists = isinstance(after, list | tuple) and isinstance(before, list | tuple)
        if after != before and not (both_lists and list(after) == list(before)):
            out.append(f"{key}: {shown(before)} -> {shown(after)} ({origin})")
    return out


def _takes_back(key: str) -> bool:
    """Whether ``--set KEY=null`` removes a recipe's KEY rather than setting it to null: for
    keys hpc-grpo refuses or does not know, null has no other meaning, so a recipe is never
    edited to drop one (a plan-owned ``deepspeed``, open-r1's ``use_dora``, another tool's key)."""
    known = SPEC_FIELDS | grpo_fields() | set(RENAMED) | set(CLAIMS) | set(IGNORED)
    return key in PLAN_OWNED or key in ONLY_DEFAULT or key not in known | {"grpo", "reward_funcs"}


def _overlay(recipe: Mapping[str, Any], sets: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                          dict[str, Any], list[str]]:
    """(the recipe without the keys --set replaces, --set without the nulls that take a recipe's
    key back, lines for those). A recipe's key that --set gives is never checked: its refusal
    (a plan-owned value, an option only at TRL's default) would stand against the override."""
    back = [k for k, v in sets.items() if v is None and k in recipe and _takes_back(k)]
    kept = {k: v for k, v in recipe.items() if k not in sets}
    if isinstance(kept.get("grpo"), Mapping):  # a nested block (spec.json's, a recipe's) too
        kept["grpo"] = {k: v for k, v in kept["grpo"].items() if k not in sets}
    return (kept, {k: v for k, v in sets.items() if k not in back},
            [f"{k}: {shown(recipe[k])} dropped (--set {k}=null)" for k in back])


def build_spec(
    recipe: Mapping[str, Any], sets: Mapping[str, Any], flags: Mapping[str, Any],
    site: SiteProfile | None = None,
) -> JobSpec:
    """Merge the three sources with flags winning; flags hold only options the user gave.

    Every unknown key and every bad GRPOConfig value is reported in one UserErrors. With the
    ``site``, plan-owned keys (bf16, use_vllm, ...) are checked against it too, after the
    merge: a ``--set`` replaces the recipe's value of a plan-owned key as of any other, so a
    recipe written for GPUs runs on a CPU site with overrides only."""
    foreign = foreign_schema(recipe)
    if foreign is not None:
        raise foreign
    problems: list[UserError] = []
    found = {"recipe": Translation(), "--set": Translation()}
    before = translate(recipe, "recipe")  # the recipe as written: what "changes" compares with
    only_default = {k: v for k, v in recipe.items() if k in ONLY_DEFAULT}, \
        {k: v for k, v in sets.items() if k in ONLY_DEFAULT}
    recipe, sets, changes = _overlay(recipe, sets)
    recipe_spec, recipe_grpo = split_keys(recipe, "recipe", problems, found["recipe"])
    set_spec, set_grpo = split_keys(sets, "--set", problems, found["--set"])
    given = {k: v for k, v in flags.items() if v is not None}
    if "reward_funcs" in given:
        given["reward_funcs"] = map_rewards(given["reward_funcs"], "--reward", problems)
    merged = {**recipe_spec, **set_spec, **given}
    claims = {**found["recipe"].claims, **found["--set"].claims}
    changes += _changes({**only_default[0], **before.values, **before.claims},
                        {**only_default[1], **set_spec, **set_grpo, **found["--set"].claims}, given)
    if site is not None:
        wrong, lines = _site_claims(site, merged, claims, set(found["--set"].claims))
        problems += wrong
        changes += lines
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
    if spec is not None:
        origins = {**{k: f"--set: {k}" for k in set_spec},
                   **{k: FLAGS.get(k, f"--{k}") for k in given}}
        problems += spec_problems(spec, origins)
    if spec is not None and spec.nodes < 1:
        problems.append(UserError(f"nodes must be at least 1, got {spec.nodes}", field="nodes"))
    if spec is not None and spec.min_nodes and not 1 <= spec.min_nodes < spec.nodes:
        problems.append(UserError(
            f"min_nodes {spec.min_nodes} must be at least 1 and below nodes {spec.nodes}",
            field="min_nodes", hint="0 (the default) keeps every attempt on all its nodes"))
    if spec is not None and site is not None:
        problems += model_load_problems(site, spec)
    if spec is None or problems:
        raise UserErrors(problems) if len(problems) > 1 else problems[0]
    notes = tuple(found["recipe"].notes + found["--set"].notes)
    return dataclasses.replace(spec, notes=notes, changes=tuple(changes))
