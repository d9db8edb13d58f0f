"""Test-only fault: one rank blocks in the middle of a step, so the watchdog can be seen to act.

Off unless the ranks' environment has ``HPC_GRPO_FAULT_HANG_RANK=N`` and
``HPC_GRPO_FAULT_HANG_STEP=S`` (tests set them for ``hpc-grpo submit``; Slurm's ``--export=ALL``
and the node task pass them down). Rank N then sleeps forever inside its first reward function
of step S, the way a reward that calls out to a code sandbox or a judge model can hang: its
peers finish their rewards and wait for it in TRL's gather. It fires once per run directory
(the rank creates ``fault-hang-fired`` first), so the retried attempt trains through. Never set
it for a real run.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RANK_ENV = "HPC_GRPO_FAULT_HANG_RANK"
STEP_ENV = "HPC_GRPO_FAULT_HANG_STEP"
MARKER = "fault-hang-fired"


def target(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, step) the fault is set for, or None."""
    rank, step = env.get(RANK_ENV, ""), env.get(STEP_ENV, "")
    if not (rank.isdigit() and step.isdigit()):
        return None
    return int(rank), int(step)


def _fire_once(run_dir: Path) -> bool:
    try:
        fd = os.open(run_dir / MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def wrap_rewards(rewards: list[Any], env: Mapping[str, str], run_dir: Path,
                 rank: int) -> list[Any]:
    """The reward functions, the first one made to hang on the fault's rank and step."""
    found = target(env)
    if found is None or found[0] != rank or not rewards or not callable(rewards[0]):
        return rewards
    step = found[1]
    first: Callable[..., Any] = rewards[0]

    @functools.wraps(first)  # keeps __name__: TRL names the reward's metrics by it
    def hanging(*args: Any, **kwargs: Any) -> Any:
        state = kwargs.get("trainer_state")
        current = int(getattr(state, "global_step", -1)) + 1  # the step being computed
        if current == step and _fire_once(run_dir):
            print(f"[fault] {RANK_ENV}={rank} {STEP_ENV}={step}: rank {rank} blocks in step "
                  f"{step}, inside reward {getattr(first, '__name__', '?')}", flush=True)
            while True:
                time.sleep(3600)
        return first(*args, **kwargs)

    return [hanging, *rewards[1:]]
