"""GRPOConfig values from a recipe or ``--set``, checked on the login node against TRL's own types.

A bad value found by TRL on the nodes costs a queue wait and then fails every rank; the same
value found here costs seconds. Kinds and allowed strings come from the shipped field list
(``grpo_fields.txt``, written by ``scripts/update_grpo_fields.py`` from the TRL the runtime pins);
ranges are the ones TRL documents or that only make sense one way. Cross-field rules of TRL's
``__post_init__`` are left to the nodes, where a violation is a configuration error, not retried.
Pure: values in, (values, problems) out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError, did_you_mean

FIELDS_FILE = Path(__file__).resolve().parent.parent / "grpo_fields.txt"


@dataclass(frozen=True)
class FieldType:
    """What one GRPOConfig field accepts: kinds (int, float, bool, str, list[...], dict, any,
    none) and, for strings, the values TRL allows (empty: any string)."""

    kinds: tuple[str, ...]
    choices: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def field_types() -> dict[str, FieldType]:
    """The shipped field list: ``name kinds [choices]`` per line."""
    out = {}
    for line in FIELDS_FILE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, kinds, *rest = line.split(" ")
        out[name] = FieldType(tuple(kinds.split("|")), tuple(rest[0].split(",")) if rest else ())
    return out


@dataclass(frozen=True)
class Range:
    """A number's allowed range, with the words the error uses."""

    ok: Callable[[float], bool]
    text: str


def _at_least(low: int) -> Range:
    return Range(lambda v: v >= low, f"at least {low}")


_POSITIVE = Range(lambda v: v > 0, "greater than 0")
_NOT_NEGATIVE = Range(lambda v: v >= 0, "0 or more")
_UNIT = Range(lambda v: 0 <= v <= 1, "between 0 and 1")
_BELOW_ONE = Range(lambda v: 0 <= v < 1, "at least 0 and below 1")
# transformers' and accelerate's set_seed hand the seed to numpy's np.random.seed, which refuses
# anything outside [0, 2**32 - 1] ("Seed must be between 0 and 2**32 - 1") on every rank after
# the queue wait. data_seed seeds the data sampler's generator: held to the same range, a seed
# that any of the libraries may pass on (tests/unit/config/test_grpo_values.py's premise test).
SEED_MAX = 2**32 - 1
SEED = Range(lambda v: 0 <= v <= SEED_MAX, "between 0 and 2**32 - 1 (numpy's seed range)")

RANGES: dict[str, Range] = {
    # TRL's -1 (the default) means "train num_train_epochs epochs"; 0 and below trains nothing
    "max_steps": Range(lambda v: v == -1 or v >= 1,
                       "a positive number of steps, or -1 to train num_train_epochs epochs"),
    "num_generations": Range(lambda v: v >= 2, "at least 2 (GRPO compares completions of one "
                             "prompt)"),
    "num_train_epochs": _POSITIVE,
    "learning_rate": _POSITIVE,
    "temperature": _POSITIVE,
    "repetition_penalty": _POSITIVE,
    "adam_epsilon": _POSITIVE,
    "save_steps": _POSITIVE,  # below 1: a fraction of the run
    "logging_steps": _POSITIVE,
    "eval_steps": _POSITIVE,
    "top_p": Range(lambda v: 0 < v <= 1, "greater than 0 and at most 1"),
    "min_p": _UNIT,
    "top_entropy_quantile": _UNIT,
    "ref_model_mixup_alpha": _UNIT,
    "adam_beta1": _BELOW_ONE,
    "adam_beta2": _BELOW_ONE,
    "label_smoothing_factor": _BELOW_ONE,
    "beta": _NOT_NEGATIVE,
    "epsilon": _NOT_NEGATIVE,
    "epsilon_high": _NOT_NEGATIVE,
    "weight_decay": _NOT_NEGATIVE,
    "max_grad_norm": _NOT_NEGATIVE,
    "warmup_steps": _NOT_NEGATIVE,
    "entropy_coef": _NOT_NEGATIVE,
    "top_k": _NOT_NEGATIVE,  # 0: no top-k filtering
    "dataloader_num_workers": _NOT_NEGATIVE,
    "data_seed": SEED,  # the job spec's seed is not a GRPOConfig value: config/spec_checks.py
    **{name: _at_least(1) for name in (
        "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
        "num_generations_eval", "generation_batch_size", "steps_per_generation", "num_iterations",
        "max_completion_length", "save_total_limit", "ref_model_sync_steps",
        "torch_empty_cache_steps", "eval_accumulation_steps", "ddp_timeout")},
}
# What an infinite value was likely meant to say, and how to say it.
NOT_FINITE_HINTS = {
    "max_grad_norm": "max_grad_norm: 0 turns gradient clipping off (transformers clips only "
                     "above 0)"}
# Fields the plan computes with (batch rules, vLLM context): TRL's null would leave it guessing.
PLAN_NEEDS = ("num_generations", "max_completion_length")

# report_to's names: transformers' INTEGRATION_TO_CALLBACK, which refuses any other name on every
# rank after the queue wait. Written out, not imported: a login node has no transformers
# (tests/unit/config/test_report_to.py compares it with the installed one).
REPORT_TO = ("azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte",
             "kubeflow", "mlflow", "neptune", "swanlab", "tensorboard", "trackio", "wandb")
REPORT_TO_ALONE = ("all", "none")  # transformers takes these only as the whole value


def report_to_problem(value: Any) -> tuple[str, str]:
    """(problem, hint) for report_to as TRL takes it (a name or a list of names); ("", "") if fine."""
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    if len(names) == 1 and names[0] in REPORT_TO_ALONE:
        return "", ""
    for name in names:
        if name in REPORT_TO_ALONE:
            return f"{name!r} stands only alone (report_to: {name}), not in a list of trackers", ""
        if name not in REPORT_TO:
            return (f"{name!r} is not a tracker transformers knows",
                    did_you_mean(name, (*REPORT_TO, *REPORT_TO_ALONE)))
    return "", ""


def _named(value: Any) -> str:
    """A choice as a user may type it ('Best', ' best'): the form the rules below compare; TRL
    refuses any but the lower-case one, and the choices check then says which."""
    return value.strip().lower() if isinstance(value, str) else ""


def save_strategy_problem(value: Any) -> tuple[str, str]:
    """(problem, hint) for save_strategy; ("", "") if fine.

    Why "best" is refused: transformers saves under it only where an evaluation finds a new
    best ``metric_for_best_model``, and hpc-grpo runs no evaluation during training (the eval
    keys are ignored: recipe_format.IGNORED). Without the metric (a key hpc-grpo drops)
    transformers' Trainer refuses it on every rank after the queue wait; with one it has
    anyway (``lr_scheduler_type`` reduce_lr_on_plateau or greedy set "loss"), no periodic
    checkpoint is ever written. And were an evaluation run, its decision comes after every
    callback has spoken, past the disk check, the all-ranks stop save and the epoch-end dedupe
    (runtime/rank/callbacks.py, checkpoints/marker.py). What is left is picking the best kept
    checkpoint afterwards from metrics.jsonl (export/best.py), among the ``save_total_limit``
    kept."""
    if _named(value) == "best":
        return ("'best' saves only when an evaluation finds a new best metric, and hpc-grpo runs "
                "no evaluation during training",
                "save every save_steps (save_strategy: steps), raise save_total_limit (default "
                "3) to keep more to choose from, and pick the best afterwards: hpc-grpo export "
                "RUN --best reward_mean (or eval RUN --best KEY)")
    return "", ""


# transformers steps these schedulers only after an evaluation, with its metric
# (Trainer._evaluate); during training it skips them (its training loop).
STEPPED_BY_EVALUATION = ("reduce_lr_on_plateau", "greedy")


def lr_scheduler_problem(value: Any) -> tuple[str, str]:
    """(problem, hint) for lr_scheduler_type; ("", "") if fine. Refused: the schedulers that
    change the learning rate only on an evaluation's metric. hpc-grpo runs none, so the run
    would train at the initial learning rate throughout, with nothing saying so."""
    if _named(value) in STEPPED_BY_EVALUATION:
        return (f"{_named(value)!r} changes the learning rate only after an evaluation, and "
                "hpc-grpo runs no evaluation during training: it would stay constant",
                "lr_scheduler_type: constant says that plainly; linear or cosine decay it by step")
    return "", ""


# Checks of one field's whole value beyond its kinds and choices: (problem, hint).
VALUE_RULES: dict[str, Callable[[Any], tuple[str, str]]] = {
    "report_to": report_to_problem, "save_strategy": save_strategy_problem,
    "lr_scheduler_type": lr_scheduler_problem}

_WORDS = {"none": "null", "dict": "a mapping", "any": "anything"}


class _Mismatch(Exception):
    pass


def _scalar(value: Any, kind: str) -> Any:
    """``value`` as ``kind`` where that loses nothing, else _Mismatch."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "any":
        return value
    if kind == "none" and value is None:
        return None
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and number and float(value).is_integer():
        return int(value)
    if kind == "float" and number:
        return float(value)
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "dict" and isinstance(value, dict):
        return value
    if kind.startswith("list") and isinstance(value, list | tuple):
        element = kind[5:-1]
        return [_scalar(v, element) for v in value] if element else list(value)
    raise _Mismatch


def _coerce(value: Any, kinds: tuple[str, ...]) -> Any:
    for kind in kinds:
        try:
            return _scalar(value, kind)
        except _Mismatch:
            continue
    plain = isinstance(value, int | float) and not isinstance(value, bool)
    if plain and set(kinds) <= {"str", "none"}:  # a name YAML read as a number (run_name: 2024)
        return str(value)
    raise _Mismatch


def _expected(kinds: tuple[str, ...]) -> str:
    return " or ".join(_WORDS.get(k, k.replace("list[", "a list of ").rstrip("]")) for k in kinds)


def check_value(name: str, value: Any, field: FieldType) -> tuple[Any, str, str]:
    """(the value as TRL takes it, problem, hint); the problem is "" when the value is fine."""
    if value is False and "no" in field.choices:  # YAML 1.1 reads `save_strategy: no` as false
        value = "no"
    try:
        out = _coerce(value, field.kinds)
    except _Mismatch:
        shown = f"{type(value).__name__} {value!r}" if value is not None else "null"
        return value, f"expected {_expected(field.kinds)}, got {shown}", ""
    if out is None and name in PLAN_NEEDS:
        return value, "must be a number: the plan sizes batches and vLLM's context from it", ""
    # the value rules first: a choice TRL has but hpc-grpo refuses ('best', or 'Best') gets its
    # reason, not a did-you-mean that would lead to it
    problem, hint = VALUE_RULES[name](out) if name in VALUE_RULES else ("", "")
    if problem:
        return value, problem, hint
    if isinstance(out, str) and field.choices and out not in field.choices:
        refused = {c for c in field.choices if name in VALUE_RULES and VALUE_RULES[name](c)[0]}
        return value, f"{out!r} is not one of TRL's values", did_you_mean(
            out, [c for c in field.choices if c not in refused])
    rule = RANGES.get(name)
    if rule is not None and isinstance(out, int | float) and not isinstance(out, bool):
        # every range refuses NaN (no comparison holds); infinity passed "> 0" and ">= 0", and
        # TRL or torch then fail on it (int(inf) for warmup_steps) or train on it: an infinite
        # learning_rate, a max_grad_norm that clips nothing
        if not math.isfinite(out):
            return value, f"must be finite and {rule.text}, got {out!r}", NOT_FINITE_HINTS.get(
                name, "")
        if not rule.ok(out):
            return value, f"must be {rule.text}, got {out!r}", ""
    return out, "", ""


def check_values(values: Mapping[str, Any],
                 sources: Mapping[str, str]) -> tuple[dict[str, Any], list[UserError]]:
    """Every known field's value checked; all problems, one UserError each (``sources`` names
    where a key came from: recipe or --set). Unknown keys are split_keys' business."""
    types = field_types()
    out: dict[str, Any] = {}
    problems: list[UserError] = []
    for name, value in values.items():
        field = types.get(name)
        if field is None:
            out[name] = value
            continue
        checked, problem, hint = check_value(name, value, field)
        out[name] = checked
        if problem:
            problems.append(UserError(problem, field=f"{sources.get(name, 'recipe')}: {name}",
                                      hint=hint))
    return out, problems
