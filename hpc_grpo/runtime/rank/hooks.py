"""The rank's hooks on the built GRPOTrainer, in the one order they are installed.

Each is ``install(trainer, ctx)`` (context.py): it adds a callback or wraps a method on the
trainer instance and returns its lines for the rank's log. Wrappers on the same method nest in
list order, the later one outside; callbacks run in the order they were added. Test-only faults
are not in ``HOOKS``: ``for_env`` adds their one hook when the environment asks for a fault.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from hpc_grpo.runtime.rank.checkpoints import (
    background_save,
    deepspeed_save,
    pinned_save,
    prefetch,
    read,
    rng_states,
    save_parts,
    save_speed,
    universal,
)
from hpc_grpo.runtime.rank.context import Hook, HookContext
from hpc_grpo.runtime.rank.data import epoch_order
from hpc_grpo.runtime.rank.generation import buffer, engine_weights, lora_sync, record
from hpc_grpo.runtime.rank.observe import heartbeat, startup_profile, startup_times, tracking

HOOKS: tuple[Hook, ...] = (
    prefetch.install,  # stops the resume's read-ahead at train begin, with its line
    engine_weights.install,  # an engine started from random weights: all filled by push 1?
    epoch_order.install,  # each epoch's data order as an uninterrupted run has it
    buffer.install,  # a block's completions, saved inside the block
    heartbeat.install,  # progress for the node task's hang watchdog
    record.install,  # the colocated engine's first completions
    lora_sync.install,  # before the faults, which wrap whatever walk is set
    read.install,  # a resume read through mappings
    rng_states.install,  # rank 0's RNG state across 1 <-> N processes (resume --nodes)
    universal.install,  # ZeRO-3's Adam step counts after a universal load, one per group
    save_speed.install,  # torch.save's CRC-32s (off by default)
    pinned_save.install,  # inside save_parts: its time counts in the save's parts
    deepspeed_save.install,  # DeepSpeed's files alone, written once; inside save_parts too
    background_save.install,  # async_save: a periodic save's bulk written while training goes on
    save_parts.install,  # outermost wrapper of the save calls: each part as it runs
    tracking.install,  # the resuming W&B and TensorBoard callbacks
    startup_times.install,  # rank 0: its step-end mark follows every other callback's
    startup_profile.install,  # rank 0 where asked: the profile ends at train begin
)

FAULT_ENV_PREFIX = "HPC_GRPO_FAULT_"  # a test-only fault (faults/), never set for a real run
FAULTS_MODULE = "hpc_grpo.runtime.rank.faults"  # by name: production wiring never imports it


def for_env(env: Mapping[str, str]) -> tuple[Hook, ...]:
    """``HOOKS``, and last the test-only faults' hook where ``env`` names a fault."""
    if not any(name.startswith(FAULT_ENV_PREFIX) for name in env):
        return HOOKS
    faults: Any = importlib.import_module(FAULTS_MODULE)
    return (*HOOKS, faults.install)


def install(trainer: Any, ctx: HookContext) -> None:
    """Every hook for ``ctx.env`` in order, each one's lines printed to the rank's log."""
    for hook in for_env(ctx.env):
        for line in hook(trainer, ctx):
            print(f"[train] {line}", flush=True)
