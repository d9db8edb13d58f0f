"""The api functions of `hpc-grpo export` and `hpc-grpo eval` (api.py re-exports them, at its
size limit): a run found by name or directory, then export/write.py or export/evaluate.py."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from hpc_grpo.export import evaluate as evaluation
from hpc_grpo.export import write
from hpc_grpo.runs import registry


def export(name: str, *, step: int | None = None, to: str | None = None, dtype: str | None = None,
           adapter: bool = False, python: str = sys.executable,
           announce: Callable[[str], None] | None = None, best: str | None = None) -> write.Exported:
    """A run's complete checkpoint as a checked Hugging Face folder; the torch work runs in a
    child ``python`` (runtime/posttrain/export.py)."""
    return write.export(registry.find_run(name), step=step, to=to, dtype=dtype, adapter=adapter,
                        python=python, announce=announce, best=best)


def evaluate(target: str, *, step: int | None = None, dataset: str | None = None,
             split: str | None = None, reward_funcs: Sequence[str] = (), limit: int = 64,
             num_samples: int = 1, seed: int = 0, max_new_tokens: int | None = None,
             python: str = sys.executable, best: str | None = None) -> evaluation.Evaluated:
    """Mean reward (95% CI) of a run's model or a model folder, with the run's dataset and
    rewards by default (runtime/posttrain/evaluate.py generates)."""
    return evaluation.evaluate(target, registry.find_run, step=step, dataset=dataset, split=split,
                               reward_funcs=reward_funcs, limit=limit, num_samples=num_samples,
                               seed=seed, max_new_tokens=max_new_tokens, python=python,
                               best=best)
