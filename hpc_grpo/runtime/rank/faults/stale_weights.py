"""Test-only fault: the trained weights never reach vLLM, so the drift check can be seen to fail.

Off unless the ranks' environment has ``HPC_GRPO_FAULT_SKIP_WEIGHT_SYNC=1`` (tests set it for
``hpc-grpo submit``; the local scheduler and the node task pass the environment down). Never
set it for a real run: every step then trains on completions of the initial model.

What it does: TRL 1.16 pushes the weights to the colocated engine through
``VLLMGeneration.sync_weights``, which walks ``_iter_named_params`` (gathering each ZeRO-3
shard, a collective every rank must join) and loads each tensor into vLLM. The fault keeps the
walk (so the collectives still match across ranks) but, from the second push on, loads the
tensors of the first push: the engine keeps the weights of step 0, as an engine whose sync was
skipped would. Skipping the push outright is not that under sleep mode: TRL sleeps the engine
at level 2 after every generation, which discards its weights, and a generation without a push
would read released memory (a crash or garbage), not stale weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

FAULT_ENV = "HPC_GRPO_FAULT_SKIP_WEIGHT_SYNC"
NOTE = (f"{FAULT_ENV}=1 (test-only fault): vLLM keeps the initial weights; every push re-sends "
        "the first one")


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(FAULT_ENV, "") == "1"


def _host_copy(tensor: Any) -> Any:
    return tensor.detach().to("cpu", copy=True)


class FirstPushForever:
    """Stands in for ``_iter_named_params``: walks the real one every time, yields its tensors
    the first time (keeping a copy of each, made while a ZeRO-3 shard is still gathered) and the
    kept copies on every later walk."""

    def __init__(self, walk: Callable[[], Iterator[tuple[str, Any]]],
                 keep: Callable[[Any], Any] = _host_copy) -> None:
        self.walk = walk
        self.keep = keep
        self.first: dict[str, Any] | None = None
        self.pushes = 0

    def __call__(self) -> Iterator[tuple[str, Any]]:
        self.pushes += 1
        if self.first is None:
            kept: dict[str, Any] = {}
            for name, tensor in self.walk():
                kept[name] = self.keep(tensor)
                yield name, tensor
            self.first = kept
            return
        for name, _current in self.walk():
            yield name, self.first[name]


def apply(trainer: Any, env: Mapping[str, str]) -> bool:
    """Put the fault on this trainer's vLLM weight push when ``env`` asks for it; True if it did."""
    generation = getattr(trainer, "vllm_generation", None)
    if not enabled(env) or generation is None:
        return False
    generation._iter_named_params = FirstPushForever(generation._iter_named_params)
    return True
