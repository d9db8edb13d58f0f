"""Reward resolution and the built-in rewards."""

from __future__ import annotations

import pytest

from hpc_grpo.runtime.rank.data.rewards import (
    RewardError,
    digits,
    length,
    resolve_reward,
    resolve_rewards,
    sum_correct,
)


def test_builtins() -> None:
    assert resolve_reward("builtin:length") is length
    assert length(["x" * 16, "x" * 20, ""]) == [0.0, -4.0, -16.0]
    assert length([[{"role": "assistant", "content": "x" * 10}]]) == [-6.0]
    assert digits(["12 ab", ""]) == [0.5, 0.0]
    assert sum_correct(["it is 7", "8"], answer=["7", "7"]) == [1.0, 0.0]


def test_module_function() -> None:
    import os.path

    assert resolve_reward("os.path:join") is os.path.join


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("builtin:nope", "unknown built-in reward 'builtin:nope'; known: builtin:accuracy, builtin:digits"),
        ("no_colon_here", "not 'builtin:NAME' or 'package.module:function'"),
        ("pkg.mod:", "not 'builtin:NAME'"),
        ("surely_missing_pkg.rewards:f", "cannot import module 'surely_missing_pkg.rewards'"),
        ("os.path:no_such_function", "module 'os.path' has no 'no_such_function'"),
        ("os:sep", "'sep' is a str, not callable"),
    ],
)
def test_resolution_errors(spec: str, message: str) -> None:
    with pytest.raises(RewardError) as info:
        resolve_reward(spec)
    assert message in str(info.value)


def test_empty_reward_list() -> None:
    with pytest.raises(RewardError, match="at least one"):
        resolve_rewards([])
