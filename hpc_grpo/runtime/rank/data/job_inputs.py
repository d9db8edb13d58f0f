"""The job's inputs (rewards, prompts, tokenizer) as every rank and the login-node probe load
them, checked before any model loads: the same code on both sides, so what passes on the login
node passes on the ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir.contract import DatasetBlock, ModelBlock
from hpc_grpo.runtime.rank.data.dataset import check_solution_column, load_prompts
from hpc_grpo.runtime.rank.data.rewards import NEEDS_SOLUTION, check_weights, resolve_rewards
from hpc_grpo.runtime.rank.setup.model_load import load_tokenizer

SAMPLE_THINKING = "Let me work it out."


@dataclass(frozen=True)
class Inputs:
    rewards: list[Callable[..., Any]]
    dataset: Any
    tokenizer: Any


def load_rewards(specs: Sequence[str], kwargs: Mapping[str, Mapping[str, Any]],
                 weights: Sequence[float], solution_column: str) -> list[Callable[..., Any]]:
    """The reward callables with their keyword arguments bound; weights checked against them."""
    check_weights(weights, specs)
    return resolve_rewards(specs, kwargs, solution_column)


def load_dataset(block: DatasetBlock, specs: Sequence[str]) -> Any:
    """The prompts, with the solution column checked when a reward compares with it."""
    dataset = load_prompts(dataclasses.asdict(block))
    check_solution_column(list(dataset.column_names), block.solution_column, specs, NEEDS_SOLUTION,
                          block.name)
    return dataset


def load_inputs(block: DatasetBlock, specs: Sequence[str], kwargs: Mapping[str, Mapping[str, Any]],
                weights: Sequence[float], model: str, model_load: ModelBlock) -> Inputs:
    """Rewards, prompts and tokenizer, in the order a typo is cheapest to find."""
    rewards = load_rewards(specs, kwargs, weights, block.solution_column)
    dataset = load_dataset(block, specs)
    return Inputs(rewards, dataset, load_tokenizer(model, model_load))


def sample_completion(row: Mapping[str, Any], solution_column: str) -> Any:
    """A well-formed completion for the sample call: think/answer tags around the reference
    answer (or a placeholder), shaped as TRL passes it (messages for chat prompts)."""
    answer = str(row.get(solution_column or "solution", "42"))
    text = f"<think>\n{SAMPLE_THINKING}\n</think>\n<answer>\n{answer}\n</answer>"
    if isinstance(row["prompt"], str):
        return text
    return [{"role": "assistant", "content": text}]


def _no_log(*_: Any, **__: Any) -> None:
    """Stands in for TRL's log_extra / log_metric callbacks outside a trainer."""


def call_once(specs: Sequence[str], rewards: Sequence[Callable[..., Any]], row: Mapping[str, Any],
              solution_column: str, tokenizer: Any = None) -> dict[str, list[float | None]]:
    """Call each reward as GRPOTrainer does, on one row and one completion: every other column
    by name, plus completion_ids and trainer_state/log_extra/log_metric. Raises ValueError
    naming the reward."""
    from transformers import TrainerState  # here: the module imports without the training stack

    completion = sample_completion(row, solution_column)
    text = completion if isinstance(completion, str) else completion[-1]["content"]
    completion_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) if tokenizer else []
    columns = {k: [v] for k, v in row.items() if k != "prompt"}
    out: dict[str, list[float | None]] = {}
    for spec, func in zip(specs, rewards, strict=True):
        try:  # the state of a trainer before its first step, as rewards see it at step 1
            values = func(prompts=[row["prompt"]], completions=[completion],
                          completion_ids=[completion_ids], trainer_state=TrainerState(),
                          log_extra=_no_log, log_metric=_no_log, **columns)
        except Exception as exc:  # any failure of user code, reported as one line
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ValueError(f"reward {spec!r} failed on the dataset's first row: "
                             f"{type(exc).__name__}: {line}") from exc
        if not isinstance(values, (list, tuple)) or len(values) != 1 or not all(
                v is None or isinstance(v, (int, float)) for v in values):
            raise ValueError(f"reward {spec!r} returned {values!r} for one completion: it must return"
                             " a list with one float (or None) per completion")
        out[spec] = [None if v is None else float(v) for v in values]
    return out
