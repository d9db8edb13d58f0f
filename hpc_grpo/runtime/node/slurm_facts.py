"""Ask Slurm about this job and its nodes, from a compute node: the runtime's only Slurm calls.

The launcher's scheduler/slurm.py cannot be imported here (runtime/ never imports the launcher
side), so this small module runs ``scontrol`` itself; what the answers mean is decided in
runtime/node/causes.py, purely. Every call is bounded and never raises: a cause that cannot be
told is named as such, it never stops a checkpoint or a requeue.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping

from hpc_grpo.runtime.node.causes import JobFacts, job_facts, parse_record

TIMEOUT_S = 5.0


def _scontrol(*args: str) -> str:
    try:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (proc.stdout or "") if proc.returncode == 0 else ""


def end_seconds_left(end_time: str, now: float) -> float | None:
    """EndTime (``2026-11-24T09:05:11``, the controller's local time) minus ``now``."""
    try:
        return time.mktime(time.strptime(end_time, "%Y-%m-%dT%H:%M:%S")) - now
    except ValueError:
        return None


def job(env: Mapping[str, str], now: float | None = None) -> JobFacts | None:
    """This job's facts now; None outside Slurm or when scontrol does not answer."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id:
        return None
    text = _scontrol("show", "job", "-o", job_id).strip()
    if not text:
        return None
    record = parse_record(text.splitlines()[0])
    count = env.get("SLURM_RESTART_COUNT", "")
    left = end_seconds_left(record.get("EndTime", ""), time.time() if now is None else now)
    return job_facts(record, int(count) if count.isdigit() else 0,
                     env.get("SLURM_JOB_NODELIST", ""), left)


def node_states(env: Mapping[str, str]) -> dict[str, str]:
    """State of every node of this attempt (``MIXED``, ``IDLE+DRAIN``, ``DOWN*``); {} when
    Slurm does not answer."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return {}
    out = {}
    for line in _scontrol("show", "node", "-o", nodelist).splitlines():
        record = parse_record(line)
        if record.get("NodeName"):
            out[record["NodeName"]] = record.get("State", "")
    return out
