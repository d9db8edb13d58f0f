"""A background checkpoint writer that starts each file late: a window in which a stop signal,
a killed node or a time limit arrives while a periodic save is still being written
(``checkpoints/background_save.py``), for the tests of what then happens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENV = "HPC_GRPO_FAULT_BACKGROUND_WRITE_DELAY_S"


def apply(marker: Any, env: Mapping[str, str]) -> str:
    """Delay each background file write by the environment's seconds; the rank log's line, or
    "" where the fault is off or the run writes no save in the background."""
    delay = float(env.get(ENV) or 0)
    writer = getattr(marker, "background", None)
    if delay <= 0 or writer is None:
        return ""
    writer.delay_s = delay
    return f"test fault: each background checkpoint file is written {delay:g} s late ({ENV})"
