"""Reward functions: built-ins for smoke runs, and "package.module:function" for users' own.

TRL calls a reward as f(prompts=..., completions=..., **dataset_columns) -> list[float] and
names its metrics after f.__name__.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

RewardFunc = Callable[..., list[float]]
LENGTH_TARGET = 16  # characters


class RewardError(ValueError):
    """A reward spec that does not resolve to a callable."""


def _text(completion: Any) -> str:
    """Completion text for plain prompts (str) and conversational ones (list of messages)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


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


BUILTIN: dict[str, RewardFunc] = {"length": length, "digits": digits, "sum_correct": sum_correct}


def resolve_reward(spec: str) -> RewardFunc:
    """Turn "builtin:NAME" or "package.module:function" into a callable, or raise RewardError."""
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTIN:
            known = ", ".join(f"builtin:{k}" for k in sorted(BUILTIN))
            raise RewardError(f"unknown built-in reward {spec!r}; known: {known}")
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


def resolve_rewards(specs: list[str]) -> list[RewardFunc]:
    """All reward specs of a run; at least one is required."""
    if not specs:
        raise RewardError("reward_funcs is empty: GRPO needs at least one reward")
    return [resolve_reward(s) for s in specs]
