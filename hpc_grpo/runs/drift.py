"""Does vLLM generate with the weights just trained? A judgement of metrics.jsonl (issue #15).

Every step the ranks record ``vllm_logp_diff_mean``: the mean, over the step's sampled
completion tokens, of |vLLM's log-probability of the token - the trainer's| (TRL 1.16's
``sampling/sampling_logp_difference/mean``, computed while ``vllm_importance_sampling_correction``
is on, TRL's default). Both sides score the same tokens with what should be the same weights, so
only numerics separate them; an engine left with older weights scores them with another model.

The bound, 0.1 nats, sits between the two, from published numbers:
- same weights, bf16, dense models: 0.001-0.007 per token between vLLM and transformers on one
  GPU (discuss.vllm.ai, "Difference in log probabilities between vLLM and HF model"), a mean of
  0.005-0.006 for Qwen3-32B against FSDP and Megatron trainers, and about 0.015 in TRL's own
  report of a healthy run (TRL issue 5312);
- stale weights: TRL 1.9's sleep-mode bug (TRL issue 5312, fixed by PR 5313) generated from
  weights vLLM had discarded and moved the same mean from 0.015 to 0.2, later 0.81.
0.1 is about 7x the healthy dense values and half the smallest stale one. Mixture-of-experts
models disagree more with the same weights (0.14-0.34 measured for Qwen3-30B-A3B), so for them
a flag is a reason to look, not proof. tests/gpu/test_weights_reach_vllm.py measures both sides
of the bound with a healthy engine and one whose weight push is skipped on purpose; on an H200
(2026-11-24, docs/benchmarks.md): 0.006-0.009 healthy, 0.62-0.65 stale from step 2.

A stale engine stays stale, so a flag needs no persistence: any of the last ``WINDOW`` steps
above the bound raises it. Values in, values out: ``status`` reads the lines, this decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir import finite_number
from hpc_grpo.rundir.contract import LOGP_DIFF_MEAN

BOUND_NATS = 0.1
WINDOW = 5  # the last steps status looks at


@dataclass(frozen=True)
class Drift:
    """The worst recent step above the bound."""

    step: int
    value: float
    bound: float

    def line(self) -> str:
        return (f"vLLM drift: at step {self.step} vLLM's log-probabilities of the sampled tokens "
                f"differ from the trainer's by {self.value:.3f} on average (bound {self.bound:g}):"
                " the engine may generate with stale weights")


def logp_diff(row: Mapping[str, Any]) -> float | None:
    """A metrics line's ``vllm_logp_diff_mean``, None where it has no finite number."""
    return finite_number(row.get(LOGP_DIFF_MEAN))


def exceeds(value: float, bound: float = BOUND_NATS) -> bool:
    return value > bound


def judge(rows: Sequence[Mapping[str, Any]], bound: float = BOUND_NATS,
          window: int = WINDOW) -> Drift | None:
    """The step with the largest difference above ``bound`` among the last ``window`` lines
    that carry one; None when none exceeds it or no line carries a value."""
    carried = [(row, value) for row in rows if (value := logp_diff(row)) is not None][-window:]
    worst: Drift | None = None
    for row, value in carried:
        step = row.get("step")
        if exceeds(value, bound) and (worst is None or value > worst.value):
            worst = Drift(int(step) if isinstance(step, int | float) else 0, value, bound)
    return worst
