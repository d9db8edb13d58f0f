"""Restart causes checked against Slurm's accounting: ``sacct --duplicates`` keeps one record per
attempt of a job, ending PREEMPTED, NODE_FAIL or TIMEOUT where Slurm itself stopped it. Pure.

The node task names a cause from what Slurm said the moment it stopped (runtime/node/causes.py);
where that could not tell (a preemption arriving as a plain TERM reads as ``scontrol requeue``;
a node that died before Slurm noticed reads as ``task crash``; node 0 lost records nothing), the
attempt's sacct record, written afterwards, is the better witness (docs/causes.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hpc_grpo.rundir import finite_number
from hpc_grpo.rundir.startup import INNER_PARTS, PART_NAMES
from hpc_grpo.rundir.view import RestartLine

SACCT_CAUSES = {"PREEMPTED": "preempted", "NODE_FAIL": "node failure", "TIMEOUT": "time limit"}
# Causes that sacct's own record may correct; a precise one (user signal, preempted) stays.
_VAGUE = ("scontrol requeue", "task crash", "killed (no stop recorded)",
          "signal (cause not recorded)")
_ATTEMPT = re.compile(r"^slurm-(\d+(?:_\d+)?)\.(\d+)$")


def _vague(cause: str) -> bool:
    return cause in _VAGUE or cause.endswith("(Slurm gave no record)")


def with_accounting(restarts: Sequence[RestartLine], job_id: str,
                    attempt_states: Sequence[str]) -> list[RestartLine]:
    """Each restart with ``slurm_state``, the end state sacct recorded for the attempt it ended
    (``attempt_states``: this job's records in attempt order), and a vague cause replaced where
    that state names the cause."""
    out = []
    for restart in restarts:
        found = _ATTEMPT.match(restart.previous_attempt)
        if found and found.group(1) == job_id and int(found.group(2)) < len(attempt_states):
            state = attempt_states[int(found.group(2))]
            cause = SACCT_CAUSES[state] if state in SACCT_CAUSES and _vague(restart.cause) \
                else restart.cause
            restart = replace(restart, slurm_state=state, cause=cause)
        out.append(restart)
    return out


def _job_of(attempt: str) -> str:
    """The job an attempt id belongs to: ``slurm-JOB.N``'s JOB; any other id (a local attempt,
    ``local-PID-XXXX``: one per job, as a local run has no requeue) is a job of its own."""
    found = _ATTEMPT.match(attempt)
    return found.group(1) if found else attempt


def is_resume(restart: RestartLine, resubmitted: Mapping[str, str] | None = None) -> bool:
    """The restart line of ``hpc-grpo resume``: the first attempt of a new job after an earlier
    job's. Not a requeue (nothing of Slurm's or of the node task's brought the run back: the
    user did), so status shows it apart from the requeues. Lines without attempts (older
    releases) stay requeues, as they were shown, and so does a job a node task submitted in
    place of the earlier one without a dead node (``resubmitted``: new job -> old job, from
    jobs.jsonl; runtime/node/replace.py)."""
    if not (restart.attempt and restart.previous_attempt):
        return False
    job, previous = _job_of(restart.attempt), _job_of(restart.previous_attempt)
    return job != previous and (resubmitted or {}).get(job) != previous


def resumed_line(resumes: Sequence[RestartLine]) -> str:
    """The user's resumes, one line: 'resumed by the user from step 3' (the last one; how many
    where more than one; the steps the earlier job trained past its checkpoint, where any)."""
    if not resumes:
        return ""
    last = resumes[-1]
    times = f" {len(resumes)} times, last" if len(resumes) > 1 else ""
    lost = f" ({last.steps_lost} steps past it lost)" if last.steps_lost else ""
    return f"resumed by the user{times} from step {last.resumed_from_step or 0}{lost}"


def nodes_line(restarts: Sequence[RestartLine], startup: Mapping[str, Any], nodes: int,
               min_nodes: int) -> str:
    """Each attempt's node count where the run allows fewer (``min_nodes``): 'attempt 2 on 2 of
    3 nodes (min_nodes 2: Slurm granted the nodes free), attempt 3 on 3 of 3 nodes', from the
    restart lines and the last startup.jsonl line (a first attempt, too, starts on fewer nodes
    when only min_nodes are free). The attempt's number is Slurm's restart count + 1; lines
    without a count (older runs) are left out, and "" for a run without min_nodes."""
    if not min_nodes:
        return ""
    counts = {r.attempt: r.nodes for r in restarts if r.nodes}
    last, count = startup.get("attempt"), startup.get("nodes")
    if isinstance(last, str) and isinstance(count, int) and last not in counts:
        counts[last] = count
    shown = []
    for attempt, count in counts.items():
        found = _ATTEMPT.match(attempt)
        which = f"attempt {int(found.group(2)) + 1}" if found else f"attempt {attempt}"
        why = f" (min_nodes {min_nodes}: Slurm granted the nodes free)" if count < nodes else ""
        shown.append((int(found.group(2)) if found else 0, f"{which} on {count} of {nodes} nodes{why}"))
    return ", ".join(line for _, line in sorted(shown))


def startup_line(last: Mapping[str, Any], attempt: str = "") -> str:
    """The last attempt's time to its first step, largest part first (startup.jsonl's last line,
    written by rank 0: runtime/rank/observe/startup_times.py); "" before any attempt reached a step, when the
    line is an older attempt's than ``attempt`` (state.json's: the current one has not stepped
    yet), or for a line that is not one."""
    parts, total = last.get("parts_s"), finite_number(last.get("total_s"))
    if not isinstance(parts, Mapping) or total is None or (attempt and last.get("attempt") != attempt):
        return ""
    resumed = last.get("resumed_from_step")
    start = f"resumed from step {resumed}" if isinstance(resumed, int) and not isinstance(
        resumed, bool) else "from scratch"
    inner = {PART_NAMES[part]: _ranked(last.get(key), names)  # the calls timed inside a part
             for part, (key, names) in INNER_PARTS.items()}
    split = ", ".join(f"{name} {value:.1f}{_within(inner.get(name))}"
                      for value, name in _ranked(parts, PART_NAMES))
    return f"start-up ({start}): first step {total:.1f} s after the rank started ({split})"


def _within(ranked: list[tuple[float, str]] | None) -> str:
    return f" ({', '.join(f'{name} {value:.1f}' for value, name in ranked)})" if ranked else ""


def _ranked(raw: Any, names: Mapping[str, str]) -> list[tuple[float, str]]:
    """(seconds, name) of a record's parts, largest first; damaged values left out, and nothing
    for an older line without the mapping or a damaged one."""
    if not isinstance(raw, Mapping):
        return []
    return sorted(((v, names.get(str(k), str(k))) for k, x in raw.items()
                   if (v := finite_number(x)) is not None), reverse=True)
