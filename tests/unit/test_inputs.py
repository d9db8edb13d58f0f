"""The login node's view of built-in names must match what the ranks can load."""

from __future__ import annotations

from hpc_grpo.preflight import inputs
from hpc_grpo.runtime.rank import data, rewards


def test_builtin_datasets_match_runtime() -> None:
    assert set(inputs.BUILTIN_DATASETS) == {f"builtin:{n}" for n in data.BUILTIN}


def test_builtin_rewards_match_runtime() -> None:
    assert set(inputs.BUILTIN_REWARDS) == {f"builtin:{n}" for n in rewards.BUILTIN}
