"""Why an attempt stopped, from Slurm's own records: pure decisions, values in and values out.

The rank-0 node task asks Slurm (runtime/node/slurm_facts.py) the moment a stop signal arrives,
and again after a crash; these functions read what it answered. What Slurm 22.05 shows in each
case was recorded on the sandbox cluster (docs/causes.md; the unit tests replay those records):

- ``scancel --signal=USR2 JOB`` (or the batch shell's USR2, forwarded): RUNNING, PreemptTime None.
- partition preemption (``preempt_send_user_signal``): USR2 while RUNNING, PreemptTime set,
  EndTime moved to PreemptTime + GraceTime.
- time limit (``--signal=USR2@lead``): RUNNING or SIGNALING, no PreemptTime, EndTime - now <=
  lead + 60 s.
- ``scontrol requeue JOB``: SIGTERM while COMPLETING, Restarts already one more than this
  attempt's SLURM_RESTART_COUNT.
- a node lost: SIGTERM to the others while COMPLETING, Restarts one more, NodeList without it.
- ``scancel JOB``: SIGTERM while COMPLETING, Restarts unchanged.
- a task killed (no signal to the node task): the job's nodes are all up; a node DOWN, DRAINED
  or NOT_RESPONDING makes it a node failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpc_grpo.rundir import contract

PREEMPTED = "preempted"
TIME_LIMIT = "time limit"
USER_SIGNAL = "user signal"
REQUEUED = "scontrol requeue"
NODE_FAILURE = contract.NODE_FAILURE  # status reads it (scheduler/jobstate.py)
TASK_CRASH = "task crash"
CANCELLED = contract.CANCELLED  # status reads it (scheduler/jobstate.py)
# Slurm may send --signal up to 60 s before the lead it was given (seen: 52 s left for @30).
SIGNAL_SLACK_S = 60.0
# Node state flags (`scontrol show node`'s State, "+"-joined) that mean the node, not the task.
_NODE_BAD = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                       "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN", "POWERING_DOWN",
                       "REBOOT_ISSUED", "REBOOT_REQUESTED", "UNKNOWN"})
# JobState while the job runs: SIGNALING while slurmctld delivers its --signal warning (seen for
# the time-limit USR2 in the chaos benchmark, 2026-11-24).
_RUNNING = frozenset({"RUNNING", "SIGNALING"})
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.()]*)=")


def parse_record(text: str) -> dict[str, str]:
    """``scontrol show job|node -o`` (one record a line) as key -> value; values may hold spaces
    (a node's OS=Linux 6.1 #1 SMP), so a value runs up to the next ``Key=``."""
    marks = list(_KEY.finditer(text))
    out: dict[str, str] = {}
    for mark, nxt in zip(marks, [*marks[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(text)
        out.setdefault(mark.group(1), text[mark.end():end].strip())
    return out


@dataclass(frozen=True)
class JobFacts:
    """What Slurm said about this job at one moment, reduced to what the causes need."""

    state: str  # JobState: RUNNING, COMPLETING, CANCELLED, ...
    restarts: int  # scontrol's Restarts: one more than this attempt's once Slurm requeued it
    restart_count: int  # this attempt's SLURM_RESTART_COUNT (absent: 0)
    preempted: bool  # PreemptTime set: the partition's preemption has begun
    seconds_left: float | None  # EndTime - now, None where Slurm gave no end time
    nodes_lost: bool  # the job's NodeList no longer covers this attempt's SLURM_JOB_NODELIST

    @property
    def requeued(self) -> bool:
        return self.restarts > self.restart_count


def job_facts(record: Mapping[str, str], restart_count: int, attempt_nodes: str,
              seconds_left: float | None) -> JobFacts:
    """JobFacts from a parsed ``scontrol show job -o`` record and this attempt's environment."""
    restarts = record.get("Restarts", "")
    nodelist = record.get("NodeList", "")
    return JobFacts(
        state=record.get("JobState", "").upper(),
        restarts=int(restarts) if restarts.isdigit() else restart_count,
        restart_count=restart_count,
        preempted=record.get("PreemptTime", "None") not in ("None", "", "Unknown"),
        seconds_left=seconds_left,
        nodes_lost=bool(attempt_nodes and nodelist and nodelist != attempt_nodes),
    )


def stop_cause(signals: Sequence[str], facts: JobFacts | None, lead_s: float,
               seconds_left: float | None = None, slurm: bool = True) -> str:
    """The cause of a signalled stop. Outside Slurm (``slurm`` False) a signal is the user's.
    ``facts`` None under Slurm: scontrol did not answer; then only a time limit can still be
    told, from ``seconds_left``, and the rest is named as unknown rather than guessed."""
    if not slurm:
        return USER_SIGNAL
    if facts is None:
        if seconds_left is not None and seconds_left <= lead_s + SIGNAL_SLACK_S:
            return TIME_LIMIT
        return f"signal {'/'.join(signals) or '?'} (Slurm gave no record)"
    if facts.requeued:
        return NODE_FAILURE if facts.nodes_lost else REQUEUED
    if facts.state in ("COMPLETING", "CANCELLED"):
        return CANCELLED
    if facts.preempted:
        return PREEMPTED
    left = facts.seconds_left
    running = facts.state in _RUNNING
    if running and left is not None and left <= lead_s + SIGNAL_SLACK_S:
        return TIME_LIMIT
    if running:
        return USER_SIGNAL
    return f"signal {'/'.join(signals)} while {facts.state or 'in an unknown state'}"


def bad_nodes(node_states: Mapping[str, str]) -> list[str]:
    """The nodes whose State (``MIXED``, ``IDLE+DRAIN``, ``DOWN*``...) says the node failed."""
    out = []
    for node, state in node_states.items():
        flags = {f.strip().rstrip("*") for f in state.upper().split("+")}
        if state.endswith("*") or flags & _NODE_BAD:
            out.append(node)
    return out


def crash_cause(facts: JobFacts | None, node_states: Mapping[str, str],
                silent: Sequence[str] = ()) -> str:
    """The cause of an unsignalled failure: a node failure when Slurm says a node of the job is
    down, drained or not responding (or it requeued the job without one), or when a node's
    slurmd takes no connection (``silent``: Slurm would say so only minutes later), else a
    task crash."""
    if bad_nodes(node_states) or silent or (facts is not None and facts.requeued
                                            and facts.nodes_lost):
        return NODE_FAILURE
    return TASK_CRASH
