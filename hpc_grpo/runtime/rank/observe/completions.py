"""Where TRL's completions tables go: ``logs/completions.log``, not the rank log.

A recipe's ``log_completions: true`` makes TRL print a rich table of prompts, completions and
rewards at every logging step (``print_prompt_completions_sample``). Into rank 0's log that made
11 MB in 20 steps (#58), burying the lines a failure is read from. The tables go to their own
file in the run's logs folder instead, appended, as plain text: the file is no terminal, so rich
writes no colour codes, and a completion's own control bytes (an untrained model's ESC and NUL)
are written escaped (ESC as backslash-x1b), so that reading the file in a terminal cannot drive it. TRL's
W&B / trackio completions table is left as it is.
"""

from __future__ import annotations

import contextlib
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NAME = "print_prompt_completions_sample"  # as trl/trainer/grpo_trainer.py looks it up
COMPLETIONS_LOG = "completions.log"  # in the run's LOGS folder, beside the rank logs
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # all C0 controls but tab and newline


def printable(value: Any) -> Any:
    """``value`` (a prompt or completion: text, or chat messages) with control bytes escaped."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | deque):  # TRL 1.16 passes its logs' deques
        return [printable(v) for v in value]
    return value


@contextlib.contextmanager
def tables_to(path: Path) -> Iterator[None]:
    """Inside the block, every completions table TRL prints goes to ``path``; TRL's function is
    put back when the block ends, also on an exception. A TRL without it (renamed, moved) is left
    alone: its tables stay where TRL prints them."""
    import trl.trainer.grpo_trainer as grpo  # here: the module imports without the training stack

    original = vars(grpo).get(NAME)
    if not callable(original):
        yield
        return

    def to_file(*args: Any, **kwargs: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8", errors="replace") as handle, \
                contextlib.redirect_stdout(handle):
            original(*(printable(a) if i < 2 else a for i, a in enumerate(args)), **kwargs)

    setattr(grpo, NAME, to_file)
    try:
        yield
    finally:
        setattr(grpo, NAME, original)
