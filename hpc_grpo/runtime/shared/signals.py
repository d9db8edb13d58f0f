"""Signals between the node task and its ranks (stdlib only, so ranks install them before heavy
imports): the stop flag a rank's signal handler sets, what a stop-request file (the node task's
or a person's) says about why the ranks stopped, and ``DUMP_SIGNAL``, which the node task's
watchdog sends (runtime/node/watchdog.py) and each rank answers with its Python stack
(runtime/rank/observe/heartbeat.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable
from types import FrameType

from hpc_grpo.rundir import StopRequest
from hpc_grpo.rundir.contract import STOP_REQUEST, STOP_REQUESTED, signal_name

# SIGQUIT because the stop signals (USR2, TERM, a site's USR1) are taken, it is the JVM's
# thread-dump signal, and Slurm never sends it; its default action (quit with a core file) is
# only replaced.
DUMP_SIGNAL = signal.SIGQUIT


def request_reason(request: StopRequest) -> str:
    """The stop flag's reason for a stop-request file: the file's own reason where it gives one
    (the node task's record, or a person's words), so the cause can be told."""
    if request.signal:
        return f"{STOP_REQUEST} file: signal {request.signal}" + (
            f" ({request.reason})" if request.reason else "")
    return f"{STOP_REQUEST} file" + (f": {request.reason}" if request.reason else "")


def request_cause(reason: str | None) -> str | None:
    """state.json's ``stop_cause`` for a stop the ranks made for this flag reason, or None where
    it is not theirs to name: a signal (the node task names preemption, time limit, requeue)."""
    if not reason or not reason.startswith(STOP_REQUEST) or \
            reason.startswith(f"{STOP_REQUEST} file: signal "):
        return None
    return STOP_REQUESTED


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
            signal.signal(getattr(signal, "SIG" + signal_name(name)), self._handler)


def give_up_after(seconds: float, program: str) -> None:
    """End the process after ``seconds`` whatever it is stuck in (a collective, a write to a
    hung file system): doctor's node measurements must report or end, never hang a job step."""
    def stop() -> None:
        print(f"{program}: gave up after {seconds:g} s", file=sys.stderr, flush=True)
        os._exit(3)
    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
