"""Test-only fault injection, kept apart from the production rank modules.

Each fault is off unless the ranks' environment names it (``HPC_GRPO_FAULT_*``): ``hang`` makes
one rank block inside a reward so the watchdog can be seen to act; ``stale_weights`` stops the
weight sync so the vLLM/trainer log-prob check can be seen to fire; ``slow_writes`` delays
each file of a background checkpoint write (a window to interrupt one). Tests and benchmarks set
them; a real run never should. The production hook list (rank/hooks.py ``HOOKS``) does not name
this package: ``hooks.for_env`` adds its one hook, ``install``, last, when the environment
holds a variable starting with ``HPC_GRPO_FAULT_`` (hooks.FAULT_ENV_PREFIX).
"""

from __future__ import annotations

from typing import Any

from hpc_grpo import rundir
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.faults import hang, slow_writes, stale_weights


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """Every fault the environment asks for, on the built trainer; a line for each one on."""
    lines: list[str] = []
    rewards = list(trainer.reward_funcs)
    wrapped = hang.wrap_rewards(rewards, ctx.env, ctx.run_dir, ctx.rank)
    if wrapped is not rewards:  # TRL calls self.reward_funcs at every step
        trainer.reward_funcs[:] = wrapped
    if stale_weights.apply(trainer, ctx.env):
        lines.append(stale_weights.NOTE)
    if stale_weights.enabled(ctx.env) and ctx.lead:  # status shows it beside the run's notes
        notes = rundir.load_state(ctx.run_dir).notes
        rundir.update_state(ctx.run_dir, notes=[*notes, stale_weights.NOTE])
    slow = slow_writes.apply(ctx.marker, ctx.env)
    return [*lines, slow] if slow else lines

