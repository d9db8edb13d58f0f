"""Where a step's time goes: TRL's own profiled blocks, summed per optimizer step on this rank.

TRL times its blocks (vLLM generation, the weight sync, rewards, input preparation, the loss's
forward) with ``trl.extras.profiling.ProfilingContext``, but sends the numbers only to
wandb/mlflow/trackio. ``patch_profiling`` makes that class also add each duration here, on every rank,
so metrics.jsonl can split a step without a tracking service. Host-side wall time: a block that
only launches GPU work without waiting for it reads short.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# TRL's block name (after the class prefix) -> the metrics key it is summed into.
PHASES = {
    "vLLM.generate": "generate_s",
    "transformers.generate": "generate_s",
    "transformers.generate_batch": "generate_s",
    "sync_weights": "sync_weights_s",
    "_calculate_rewards": "rewards_s",
    "_prepare_inputs": "prepare_inputs_s",
    "compute_loss": "loss_forward_s",
}


class PhaseTimes:
    """Seconds per phase since the last ``take``; TRL's other blocks are ignored."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, float] = {}

    def add(self, block: str, seconds: float) -> None:
        key = PHASES.get(block.split(".", 1)[-1])  # TRL prefixes the trainer's class name
        if key is None:
            return
        with self._lock:
            self._sums[key] = self._sums.get(key, 0.0) + seconds

    def take(self) -> dict[str, float]:
        """The sums so far, rounded to 0.1 ms, and a fresh start for the next step."""
        with self._lock:
            sums, self._sums = self._sums, {}
        return {key: round(value, 4) for key, value in sorted(sums.items())}


STEP = PhaseTimes()  # this process's recorder: the ranks run one trainer each

class MemoryPhase:
    """Whether the colocated vLLM engine is awake: inside its ``sync_weights`` (weights woken and
    pushed) and ``generate`` (KV cache woken, generation, back to sleep) GPU memory sampled is
    the plan's "during generation", everywhere else its "during training"."""

    def __init__(self) -> None:
        self.depth = 0

    def __call__(self) -> str:
        return "generation" if self.depth else "training"


MEMORY_PHASE = MemoryPhase()


def patch_profiling(profiling: Any) -> bool:
    """Route ``profiling.ProfilingContext``'s durations into ``STEP`` as well (idempotent).
    False when this TRL has no such hook: the step split is then simply absent."""
    context = getattr(profiling, "ProfilingContext", None)
    original: Callable[[Any, float], None] | None = getattr(context, "_log_metrics", None)
    if context is None or original is None:
        return False
    if getattr(original, "_hpc_grpo", False):
        return True

    def _log_metrics(self: Any, duration: float) -> None:
        STEP.add(str(getattr(self, "name", "")), float(duration))
        original(self, duration)

    _log_metrics._hpc_grpo = True  # type: ignore[attr-defined]
    context._log_metrics = _log_metrics
    return True


def engine_class() -> Any:
    """TRL's colocated/served vLLM wrapper class (None where this TRL has another layout)."""
    try:
        from trl.generation.vllm_generation import VLLMGeneration  # here: kept out of the module's import
    except ImportError:
        return None
    return VLLMGeneration


def tag_engine(engine_class: Any) -> bool:
    """Make the engine's ``sync_weights`` and ``generate`` move ``MEMORY_PHASE`` (idempotent).

    The whole methods, not TRL's profiled blocks inside them: ``llm.sleep`` runs after the
    ``vLLM.generate`` block closes, and memory sampled until it returns is still the engine's.
    False when the class lacks either method (another TRL): no phase split then."""
    for name in ("sync_weights", "generate"):
        method = getattr(engine_class, name, None)
        if method is None:
            return False
        if getattr(method, "_hpc_grpo", False):
            continue
        setattr(engine_class, name, _awake(method))
    return True


def _awake(method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        MEMORY_PHASE.depth += 1
        try:
            return method(*args, **kwargs)
        finally:
            MEMORY_PHASE.depth -= 1

    wrapper._hpc_grpo = True  # type: ignore[attr-defined]
    wrapper.__doc__, wrapper.__name__ = method.__doc__, method.__name__
    return wrapper
