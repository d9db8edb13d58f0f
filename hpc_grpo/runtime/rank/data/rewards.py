"""Reward functions: built-ins (smoke-run rewards and the math rewards of math_rewards.py), and
"package.module:function" for users' own.

TRL calls a reward as f(prompts=..., completions=..., **dataset_columns) -> list[float] and
names its metrics after f.__name__ (a functools.partial is unwrapped to its function's name).
Keyword arguments from run.json's reward_kwargs are bound with functools.partial.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hpc_grpo.runtime.rank.data import math_rewards

RewardFunc = Callable[..., list[Any]]  # floats, None where a reward skips a row
LENGTH_TARGET = 16  # characters


class RewardError(ValueError):
    """A reward spec that does not resolve to a callable."""


_text = math_rewards.text_of


def length(completions: list[Any], **_: Any) -> list[float]:
    """Minus the distance in characters from a 16-character answer.

    An untrained model rambles to max_completion_length; learning to stop early is one logit
    (end of text), so the reward climbs within ~100 steps at learning rate 1e-2.
    """
    return [-float(abs(len(_text(c)) - LENGTH_TARGET)) for c in completions]


def digits(completions: list[Any], **_: Any) -> list[float]:
    """Fraction of non-space characters that are digits (0 for an empty completion)."""
    out = []
    for c in completions:
        chars = [ch for ch in _text(c) if not ch.isspace()]
        out.append(sum(ch.isdigit() for ch in chars) / len(chars) if chars else 0.0)
    return out


def sum_correct(completions: list[Any], answer: list[str] | None = None, **_: Any) -> list[float]:
    """1.0 when the completion contains the dataset's answer (builtin:sums), else 0.0."""
    if answer is None:
        raise RewardError("builtin:sum_correct needs an 'answer' column (use builtin:sums)")
    return [1.0 if a in _text(c) else 0.0 for c, a in zip(completions, answer, strict=True)]


BUILTIN: dict[str, RewardFunc] = {"length": length, "digits": digits, "sum_correct": sum_correct,
                                  **math_rewards.REWARDS}
# Built-ins that compare with the dataset's reference answer (its solution column).
NEEDS_SOLUTION = tuple(f"builtin:{name}" for name in math_rewards.NEEDS_SOLUTION)


def resolve_reward(spec: str) -> RewardFunc:
    """Turn "builtin:NAME" or "package.module:function" into a callable, or raise RewardError."""
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTIN:
            known = ", ".join(f"builtin:{k}" for k in sorted(BUILTIN))
            raise RewardError(f"unknown built-in reward {spec!r}; known: {known}")
        if spec in NEEDS_SOLUTION:
            try:
                math_rewards.require_math_verify()
            except ImportError as exc:
                raise RewardError(f"reward {spec!r}: {exc}") from exc
        return BUILTIN[name]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RewardError(f"reward {spec!r} is not 'builtin:NAME' or 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardError(
            f"reward {spec!r}: cannot import module {module_name!r} ({exc}); "
            "is it installed or on PYTHONPATH on the compute nodes?"
        ) from exc
    try:
        func = getattr(module, attr)
    except AttributeError as exc:
        raise RewardError(f"reward {spec!r}: module {module_name!r} has no {attr!r}") from exc
    if not callable(func):
        raise RewardError(f"reward {spec!r}: {attr!r} is a {type(func).__name__}, not callable")
    return func  # type: ignore[no-any-return]


def bind(func: RewardFunc, kwargs: Mapping[str, Any], spec: str) -> RewardFunc:
    """``func`` with ``kwargs`` bound (functools.partial keeping __name__); a keyword the function
    cannot take is refused here, before the model loads, not at the first step."""
    if not kwargs:
        return func
    try:
        params = inspect.signature(func).parameters
        inspect.signature(func).bind_partial(**kwargs)
    except TypeError as exc:
        raise RewardError(f"reward_kwargs for {spec!r}: {exc}") from None
    except ValueError:  # no signature to check (some C callables)
        params = {}  # type: ignore[assignment]
    if spec.startswith("builtin:"):  # their **columns take TRL's columns, not settings
        known = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD
                 and n not in ("completions", "prompts")]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise RewardError(f"reward_kwargs for {spec!r}: unexpected {', '.join(unknown)} "
                              f"(it takes: {', '.join(known) or 'no keyword arguments'})")
    bound = functools.partial(func, **kwargs)
    bound.__name__ = getattr(func, "__name__", spec)  # type: ignore[attr-defined]
    return bound


def resolve_rewards(specs: Sequence[str], kwargs: Mapping[str, Mapping[str, Any]] | None = None,
                    solution_column: str = "") -> list[RewardFunc]:
    """All reward specs of a run (at least one), each with its reward_kwargs bound; the math
    built-ins read the reference answer from ``solution_column`` ("" their default, solution)."""
    if not specs:
        raise RewardError("reward_funcs is empty: GRPO needs at least one reward")
    kwargs = kwargs or {}
    stray = sorted(set(kwargs) - set(specs))
    if stray:
        raise RewardError(f"reward_kwargs for {', '.join(map(repr, stray))}, which reward_funcs does "
                          f"not list ({', '.join(specs)}); key them by the reward's entry there")
    out = []
    for spec in specs:
        bound = dict(kwargs.get(spec) or {})
        if solution_column and spec in NEEDS_SOLUTION:
            bound.setdefault("solution_column", solution_column)
        out.append(bind(resolve_reward(spec), bound, spec))
    return out


def check_weights(weights: Sequence[float], specs: Sequence[str]) -> None:
    """TRL needs one weight per reward (it raises only once the model has loaded)."""
    if weights and len(weights) != len(specs):
        raise RewardError(f"reward_weights has {len(weights)} values for {len(specs)} rewards "
                          f"({', '.join(specs)}): give one weight per reward")
