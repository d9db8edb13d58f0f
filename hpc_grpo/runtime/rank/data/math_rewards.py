"""The rewards people train math models with: answer accuracy checked with ``math-verify``, the
think/answer format, its tag count and a length penalty, as open-r1 defines them.

TRL calls each one as f(prompts=..., completions=..., completion_ids=..., **columns): the
dataset's other columns arrive by name, so the reference answer is ``columns[solution_column]``
(``solution`` unless the job names another column). A completion is a string for plain prompts
and a list of messages for conversational ones. ``math_verify`` is imported on first use, so the
module itself imports without it; ``require_math_verify`` fails early (before the model loads).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_SOLUTION_COLUMN = "solution"
# open-r1's format: the reasoning in <think>, the answer in <answer>, each on its own lines.
FORMAT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)
TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")


class MissingSolution(KeyError):
    """The solution column did not reach the reward (not in the dataset, or removed)."""


def text_of(completion: Any) -> str:
    """Completion text for plain prompts (str) and conversational ones (list of messages)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    return str(completion)


def require_math_verify() -> None:
    """Raise ImportError with the install line when math-verify is missing."""
    try:
        import math_verify  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "math-verify is not installed: pip install 'hpc-grpo[runtime]' (or math-verify)") from exc


def _solutions(columns: Mapping[str, Any], solution_column: str, reward: str) -> Sequence[Any]:
    if solution_column not in columns:
        names = ", ".join(sorted(k for k in columns if k not in ("trainer_state", "log_extra",
                                                                  "log_metric", "completion_ids")))
        raise MissingSolution(
            f"{reward} needs the dataset's solution column {solution_column!r}; columns given: "
            f"{names or '(none)'} (set solution_column to the column with the reference answer)")
    return columns[solution_column]  # type: ignore[no-any-return]


def _timeouts() -> tuple[int | None, int | None]:
    """math-verify times out with signal.alarm, which works only in the main thread."""
    if threading.current_thread() is threading.main_thread():
        return 10, 5
    return None, None


def verdicts(completions: Sequence[Any], solutions: Sequence[Any]) -> list[bool | None]:
    """Per completion: does its answer equal the reference? None where the reference does not
    parse (such a row teaches nothing, so TRL skips it).

    The reference is parsed as LaTeX first, as open-r1 does, then as a plain expression (TRL's
    default), so "\\frac{1}{2}", "$0.5$" and GSM8K's "42" all parse. The completion must state
    its answer in LaTeX (``\\boxed{}`` tried first), as in open-r1 and TRL.
    """
    from latex2sympy2_extended import NormalizationConfig  # here: kept out of the module's import
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify  # optional package

    parse_s, verify_s = _timeouts()
    gold_config = [LatexExtractionConfig(), ExprExtractionConfig()]
    answer_config = [LatexExtractionConfig(
        normalization_config=NormalizationConfig(basic_latex=True, units=True, malformed_operators=False,
                                                 nits=False, boxed="all"),
        boxed_match_priority=0, try_extract_without_anchor=False)]
    out: list[bool | None] = []
    for completion, solution in zip(completions, solutions, strict=True):
        gold = parse(str(solution), extraction_config=gold_config, extraction_mode="first_match",
                     parsing_timeout=parse_s)
        if not gold:
            out.append(None)
            continue
        answer = parse(text_of(completion), extraction_config=answer_config,
                       extraction_mode="first_match", parsing_timeout=parse_s)
        out.append(bool(verify(gold, answer, timeout_seconds=verify_s)))
    return out


def accuracy(completions: list[Any], solution_column: str = DEFAULT_SOLUTION_COLUMN,
             **columns: Any) -> list[float | None]:
    """1.0 when the completion's answer equals the solution column's (math-verify), else 0.0;
    None (skipped by TRL) where the reference answer does not parse."""
    found = verdicts(completions, _solutions(columns, solution_column, "builtin:accuracy"))
    return [None if v is None else float(v) for v in found]


def think_format(completions: list[Any], **_: Any) -> list[float]:
    """1.0 for "<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>" and nothing else, else 0.0."""
    return [1.0 if FORMAT.match(text_of(c)) else 0.0 for c in completions]


def tag_count(completions: list[Any], **_: Any) -> list[float]:
    """0.25 for each of the four format tags present exactly once: partial credit on the way to
    the format reward."""
    return [sum(0.25 for tag in TAGS if text_of(c).count(tag) == 1) for c in completions]


def length_penalty(completions: list[Any], solution_column: str = DEFAULT_SOLUTION_COLUMN,
                   **columns: Any) -> list[float]:
    """open-r1's len_reward (Kimi 1.5): over the completions of one call, shortest gets 0.5 and
    longest -0.5 (by characters); a wrong answer never gets more than 0. All of one length: 0.

    A reference answer that does not parse counts as correct (open-r1: not penalised).
    """
    found = verdicts(completions, _solutions(columns, solution_column, "builtin:length_penalty"))
    lengths = [len(text_of(c)) for c in completions]
    low, high = min(lengths, default=0), max(lengths, default=0)
    if high == low:
        return [0.0] * len(completions)
    out = []
    for size, correct in zip(lengths, found, strict=True):
        value = 0.5 - (size - low) / (high - low)
        out.append(value if correct in (True, None) else min(0.0, value))
    return out


think_format.__name__ = "format"  # TRL names its metrics after __name__: rewards/format/mean

NEEDS_SOLUTION = ("accuracy", "length_penalty")
REWARDS: dict[str, Callable[..., list[Any]]] = {
    "accuracy": accuracy, "format": think_format, "tag_count": tag_count,
    "length_penalty": length_penalty}
