"""The stop flag a signal handler sets (stdlib only, so ranks install it before heavy imports)."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from types import FrameType


class StopFlag:
    """Set by a signal handler; read at step ends. The handler only sets a flag: no I/O, no
    collectives, which would be unsafe in the middle of a step."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.reason = self.reason or f"signal {signal.Signals(signum).name}"

    def install(self, names: Iterable[str]) -> None:
        """Handle e.g. ["USR2", "TERM"]; replaces the SIG_IGN the node task's agent passed down."""
        for name in names:
            signal.signal(getattr(signal, "SIG" + name.upper().removeprefix("SIG")), self._handler)
