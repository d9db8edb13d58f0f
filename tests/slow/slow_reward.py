"""Rewards that take a fixed time, so a test's step time has a floor whatever the machine's load."""

from __future__ import annotations

import time
from typing import Any

from hpc_grpo.runtime.rank.rewards import length


def slow_length(completions: list[Any], **kwargs: Any) -> list[float]:
    time.sleep(0.5)
    return length(completions, **kwargs)


def one_second_length(completions: list[Any], **kwargs: Any) -> list[float]:
    time.sleep(1.0)
    return length(completions, **kwargs)
