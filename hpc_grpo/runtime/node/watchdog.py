"""The hang watchdog: a thread in each node task that ends an attempt which stopped progressing.

A blocked collective (a lost NCCL peer, a reward that never returns) would otherwise hold the
allocation until the collective timeout or the time limit, with nothing in the logs. Every node
task watches the heartbeats of ALL ranks (a shared run directory) with the pure decision in
stall.py, so the nodes conclude within one poll of each other. Then each one:

1. sends SIGQUIT to its own ranks: each writes its Python stack to its log (heartbeat.py);
2. waits two polls and a little, so that the other nodes have dumped too before any rank dies
   (a peer's death would turn a blocked rank's wait into an exception and no stack);
3. on the rank-0 node, records the finding in state.json (stop_cause "stalled", ``stalled``:
   ranks behind, each rank's place, idle time and bound);
4. SIGKILLs its ranks and everything under them, then torchrun if it does not exit by itself.

torchrun then exits non-zero and the node task's bounded retry path takes over (task.py
``_after_exit``, retry.decide_retry): requeued from the newest complete checkpoint, at most
``max_requeues`` times, stopped when two attempts end at the same checkpoint. The ranks are
found as torchrun's descendants in /proc: torchrun starts them in their own sessions, so its
process group does not hold them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import HEARTBEATS, STALLED, RunRecord
from hpc_grpo.runtime.node.stall import Beat, Policy, Stall, judge, poll_interval
from hpc_grpo.runtime.shared.signals import DUMP_SIGNAL

RANK_MODULE = "hpc_grpo.runtime.rank."  # what a rank's command line holds


def read_beats(run_dir: str, world_size: int) -> dict[int, Beat | None]:
    folder = Path(run_dir) / HEARTBEATS
    return {r: Beat.from_dict(rundir.read_json(folder / f"rank-{r}.json"))
            for r in range(world_size)}


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in /proc."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, parents before children."""
    parents = _parents()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier and p not in found]
        found += children
        frontier = children
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):  # gone already
            os.kill(pid, sig)


class Watchdog:
    """Watch one attempt's heartbeats from a daemon thread; ``fired`` holds what it found."""

    def __init__(self, run: RunRecord, run_dir: str, attempt: str, started: float,
                 proc: subprocess.Popen[Any], records: bool) -> None:
        self.run, self.run_dir, self.attempt, self.started = run, run_dir, attempt, started
        self.proc = proc
        self.records = records  # the rank-0 node writes state.json
        w = run.watchdog
        self.policy = Policy(startup_s=w.startup_s, min_s=w.min_s, factor=w.factor)
        self.poll = poll_interval(self.policy)
        self.fired: Stall | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpc-grpo-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)  # it may be mid-action: let it finish recording

    def check(self, now: float | None = None) -> Stall | None:
        checkpoint = rundir.load_state(self.run_dir).checkpoint_seconds
        return judge(read_beats(self.run_dir, self.run.world_size), self.run.world_size,
                     self.attempt, time.time() if now is None else now, self.started,
                     self.policy, None if checkpoint is None else float(checkpoint))

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            if self.proc.poll() is not None:
                return
            try:
                found = self.check()
            except Exception as err:  # noqa: BLE001 - a watchdog bug must not end the run
                print(f"[watchdog] check failed: {type(err).__name__}: {err}", flush=True)
                continue
            if found is not None:
                self.fired = found
                self._end_attempt(found)
                return

    def _end_attempt(self, found: Stall) -> None:
        print(f"[watchdog] stalled: {found.line()}", flush=True)
        tree = descendants(self.proc.pid)
        ranks = [p for p in tree if RANK_MODULE in _cmdline(p)]
        print(f"[watchdog] {DUMP_SIGNAL.name} to ranks (pids {ranks}): Python stacks to their "
              "logs", flush=True)
        _signal(ranks, DUMP_SIGNAL)
        time.sleep(2 * self.poll + 3)  # the other nodes dump too before any rank dies
        if self.records:
            rundir.update_state(self.run_dir, stop_cause=STALLED, message=found.line(),
                                stalled={**found.to_dict(), "attempt": self.attempt,
                                         "time": time.time()})
        print(f"[watchdog] ending the attempt: SIGKILL to {len(tree)} processes under torchrun",
              flush=True)
        _signal(tree, signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_for(run: RunRecord, run_dir: str, attempt: str, started: float,
              proc: subprocess.Popen[Any], records: bool) -> Watchdog | None:
    """A running watchdog for a training attempt; None for other payloads (the doctor's check)."""
    if run.payload != "train":
        return None
    return Watchdog(run, run_dir, attempt, started, proc, records).start()
