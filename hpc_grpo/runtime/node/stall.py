"""Is the run stalled? A pure decision over the ranks' heartbeats: values in, a finding out.

Each rank writes ``heartbeats/rank-N.json`` (runtime/rank/observe/heartbeat.py) whenever it makes
progress: a step ends, a save ends, one of TRL's profiled blocks (generation, each reward
function, the loss) finishes. The run is stalled when NO rank has made progress within its
bound: data-parallel ranks move in lockstep, so one blocked rank soon blocks all the others in
their next collective, while one rank whose heartbeat file cannot be written (a full or slow
filesystem) must not end a healthy run.

The bound comes from the run's own measured step time: ``factor`` x the slowest recent step of
this attempt (any rank's), at least ``min_s``; a rank saving a checkpoint gets the measured
checkpoint time on top (``factor`` x it; the start-up allowance while none is measured). Until a
rank has finished its first step of the attempt (model load, engine start, compilation), the
start-up allowance counts from the attempt's start instead: nothing has been measured yet. Steps
done but no reference reported (a resume that restored a generation buffer trains its first
steps without generating): the start-up allowance again, counted from the rank's last progress.

Which ranks are behind: ranks stop at different places once one of them blocks. A rank stuck
inside its reward function has not finished that block, while its peers have and wait in the
gather that follows, so ordering ranks by (step, blocks finished in the step) names the rank
that everyone else waits for. When all are level, no rank is named: the stacks tell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SETUP, TRAINING, SAVING, ENDING = "setup", "training", "saving", "ending"


@dataclass(frozen=True)
class Beat:
    """One rank's last heartbeat, as far as the decision needs it."""

    rank: int
    attempt: str
    phase: str
    step: int  # the last step this rank completed (-1: not known yet, during set-up)
    steps_done: int  # steps completed in this attempt
    mark: int  # TRL blocks finished since the last step ended
    block: str  # the last of them ("" none)
    time: float  # when the rank last made progress
    slowest_s: float | None  # the slowest recent step of this attempt on this rank

    @classmethod
    def from_dict(cls, data: Any) -> Beat | None:
        """A heartbeat file's content, or None when it is not one (torn, edited, older)."""
        if not isinstance(data, Mapping):
            return None
        try:
            slowest = data.get("slowest_s")
            return cls(rank=int(data["rank"]), attempt=str(data.get("attempt", "")),
                       phase=str(data.get("phase", SETUP)), step=int(data.get("step", -1)),
                       steps_done=int(data.get("steps_done", 0)), mark=int(data.get("mark", 0)),
                       block=str(data.get("block", "")), time=float(data["time"]),
                       slowest_s=None if slowest is None else float(slowest))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Policy:
    """The watchdog's bounds, from run.json's watchdog block."""

    startup_s: float
    min_s: float
    factor: float


@dataclass(frozen=True)
class Stall:
    """What the watchdog found: who is behind, where every rank stopped, for how long."""

    ranks_behind: tuple[int, ...]
    steps: tuple[int, ...]  # each rank's last completed step, by rank (-1 none)
    where: tuple[str, ...]  # each rank's place, by rank: "step 3, after transformers.generate"
    idle_s: float  # since the newest progress of any rank
    bound_s: float  # the bound that progress was judged by

    def line(self) -> str:
        """One line for state.json's message and status."""
        idle = f"no progress for {self.idle_s:.0f}s (bound {self.bound_s:.0f}s)"
        if not self.ranks_behind:
            places = sorted(set(self.where))
            return f"{idle}: all {len(self.steps)} ranks stopped at {'; '.join(places)}"
        behind = ", ".join(str(r) for r in self.ranks_behind)
        first = self.ranks_behind[0]
        ahead = [self.where[r] for r in range(len(self.steps)) if r not in self.ranks_behind]
        others = f"; the others at {ahead[0]}" if ahead and len(set(ahead)) == 1 else ""
        word = "rank" if len(self.ranks_behind) == 1 else "ranks"
        return f"{idle}: {word} {behind} behind at {self.where[first]}{others}"

    def to_dict(self) -> dict[str, Any]:
        return {"ranks_behind": list(self.ranks_behind), "steps": list(self.steps),
                "where": list(self.where), "idle_s": round(self.idle_s, 1),
                "bound_s": round(self.bound_s, 1), "line": self.line()}


def step_reference(beats: Mapping[int, Beat | None]) -> float | None:
    """The run's own step time: the slowest recent step any rank measured in this attempt."""
    measured = [b.slowest_s for b in beats.values() if b is not None and b.slowest_s is not None]
    return max(measured, default=None)


def rank_bound(beat: Beat | None, policy: Policy, step_s: float | None,
               checkpoint_s: float | None, started: float, now: float) -> tuple[float, float]:
    """(seconds since this rank's last progress, the bound for it)."""
    if beat is None or beat.steps_done == 0:
        return now - started, policy.startup_s
    if step_s is None:  # steps done, none a reference yet (heartbeat.py hold_reference)
        return now - beat.time, policy.startup_s
    since = now - beat.time
    bound = max(policy.min_s, policy.factor * step_s)
    if beat.phase == SAVING:
        bound += policy.factor * checkpoint_s if checkpoint_s else policy.startup_s
    elif beat.phase == ENDING:  # the last save, the summary, the group's shutdown
        bound += policy.startup_s
    return since, bound


def _where(beat: Beat | None) -> str:
    if beat is None:
        return "start-up (no heartbeat)"
    if beat.phase == SETUP or beat.step < 0:
        return "start-up"
    if beat.phase == SAVING:
        return f"saving after step {beat.step}"
    if beat.phase == ENDING:
        return f"the end, after step {beat.step}"
    if beat.block:  # inside the next step, past this block
        return f"step {beat.step + 1}, after {beat.block}"
    return f"step {beat.step + 1}, start"


def behind(beats: Mapping[int, Beat | None], world_size: int) -> tuple[int, ...]:
    """Ranks that stopped earlier than the furthest one; () when all stopped level."""
    def key(rank: int) -> tuple[int, int]:
        beat = beats.get(rank)
        return (-2, 0) if beat is None else (beat.step, beat.mark)

    keys = {rank: key(rank) for rank in range(world_size)}
    furthest = max(keys.values(), default=(-2, 0))
    return tuple(rank for rank, k in keys.items() if k < furthest)


def _this_attempt(beat: Beat | None, attempt: str) -> Beat | None:
    return beat if beat is not None and beat.attempt == attempt else None


def judge(beats: Mapping[int, Beat | None], world_size: int, attempt: str, now: float,
          started: float, policy: Policy, checkpoint_s: float | None = None) -> Stall | None:
    """A Stall when no rank of this attempt made progress within its bound, else None.

    ``beats``: rank -> its heartbeat (None or another attempt's: no heartbeat yet);
    ``started``: when this attempt's node task started; ``checkpoint_s``: the last measured
    checkpoint time (state.json), None before the first."""
    ours = {r: _this_attempt(beats.get(r), attempt) for r in range(world_size)}
    step_s = step_reference(ours)
    judged = [rank_bound(ours[r], policy, step_s, checkpoint_s, started, now)
              for r in range(world_size)]
    if not judged or any(since <= bound for since, bound in judged):
        return None
    idle, bound = min(judged)
    return Stall(ranks_behind=behind(ours, world_size),
                 steps=tuple(-1 if b is None else b.step for b in ours.values()),
                 where=tuple(_where(ours[r]) for r in range(world_size)),
                 idle_s=idle, bound_s=bound)


def poll_interval(policy: Policy) -> float:
    """How often the watchdog looks: a quarter of the smallest bound, 1 to 10 seconds."""
    return max(1.0, min(10.0, min(policy.min_s, policy.startup_s) / 4))
