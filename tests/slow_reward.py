"""A reward that takes a fixed time, so a test's step time does not depend on machine load."""

from __future__ import annotations

import time
from typing import Any

from hpc_grpo.runtime.rewards import length


def slow_length(completions: list[Any], **kwargs: Any) -> list[float]:
    time.sleep(0.5)
    return length(completions, **kwargs)
