"""Slurm from a compute node, for the node task: a job's facts, its nodes' states, the requeue
of a crash, the resubmission of a job without a dead node (runtime/node/replace.py), all through
the runtime's one Slurm runner (runtime/shared/scontrol.py, which doctor's probe uses too); what
the answers mean is decided in runtime/node/causes.py, purely. Every call is bounded and never
raises: a cause that cannot be told is named as such, it never stops a checkpoint or a requeue.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping

from hpc_grpo.runtime.node.causes import JobFacts, job_facts, parse_record
from hpc_grpo.runtime.shared.scontrol import scontrol, slurm_command


def _scontrol(*args: str) -> str:
    return scontrol(args)[0]


def requeue(job_id: str) -> str:
    """``scontrol requeue JOB`` (a crash the node task retries); "" or why it failed."""
    return scontrol(["requeue", job_id], timeout_s=30)[1]


def submit(argv: list[str], env: Mapping[str, str]) -> tuple[str, str]:
    """``sbatch --parsable ARGV`` in ``env``: the new job's id and "", or "" and why not."""
    out, problem = slurm_command("sbatch", ["--parsable", *argv], timeout_s=30, env=env)
    job_id = out.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
    if problem or not job_id.isdigit():
        return "", problem or f"sbatch printed no job id: {out.strip()[:80]!r}"
    return job_id, ""


def cancel(job_id: str) -> str:
    """``scancel JOB``; "" or why it failed. It may be this task's own job, whose SIGTERM
    must not end scancel before it says so."""
    return slurm_command("scancel", [job_id], timeout_s=30, outlive_term=True)[1]


def drop_dependency(job_id: str) -> str:
    """Let a pending job start without waiting on its dependency; "" or why not. Sent from a
    job that has just been cancelled: it outlives the cancel's SIGTERM."""
    return scontrol(["update", f"JobId={job_id}", "Dependency="], timeout_s=30,
                    outlive_term=True)[1]


def job_record(job_id: str) -> dict[str, str]:
    """``scontrol show job -o JOB`` as key -> value; {} when Slurm does not answer."""
    text = _scontrol("show", "job", "-o", job_id).strip()
    return parse_record(text.splitlines()[0]) if text else {}


def cluster_name() -> str:
    """``ClusterName`` of ``scontrol show config`` ("" when Slurm does not say)."""
    for line in _scontrol("show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    return ""


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


def node_records(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``scontrol show node`` of every node of this attempt by name; {} when Slurm does not
    answer."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return {}
    out = {}
    for line in _scontrol("show", "node", "-o", nodelist).splitlines():
        record = parse_record(line)
        if record.get("NodeName"):
            out[record["NodeName"]] = record
    return out


def node_states(records: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Each node's State (``MIXED``, ``IDLE+DRAIN``, ``DOWN*``)."""
    return {name: record.get("State", "") for name, record in records.items()}


def slurmd_port() -> int:
    """The port every slurmd listens on (``SlurmdPort``, Slurm's default 6818)."""
    for line in _scontrol("show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmdPort" and value.strip().isdigit():
            return int(value.strip())
    return 6818


def silent_nodes(records: Mapping[str, Mapping[str, str]], port: int,
                 timeout_s: float = 3.0) -> list[str]:
    """The nodes whose slurmd takes no connection now. A node that died (or whose slurmd did)
    reads as a task crash for minutes: slurmctld marks it NOT_RESPONDING only after
    SlurmdTimeout, and its peers' ranks fail at once on the lost connection (#27). Asking each
    slurmd's port directly tells it now."""
    silent = []
    for name, record in records.items():
        address = record.get("NodeAddr") or name
        try:
            socket.create_connection((address, port), timeout=timeout_s).close()
        except OSError:
            silent.append(name)
    return silent
