"""The node's memory and this job's cgroup limit, from /proc and /sys: doctor's probe reports
them (runtime/probe.py) and each rank checks them against the plan (the rank's hardware check).
Also the CPUs this process may run on: the node task splits them into OpenMP threads, and
``site init --local`` writes them into a workstation's profile (preflight/machine.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def memory(meminfo: Path = Path("/proc/meminfo")) -> dict[str, Any]:
    """The node's memory and this job's cgroup limit (v2 memory.max, v1 limit_in_bytes)."""
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024
              for line in meminfo.read_text().splitlines() if line.endswith("kB")}
    limit = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        base = Path("/sys/fs/cgroup")
        path = base / rel.lstrip("/") / "memory.max" if controllers == "" else \
            base / "memory" / rel.lstrip("/") / "memory.limit_in_bytes"
        if (controllers == "" or "memory" in controllers.split(",")) and path.exists():
            text = path.read_text().strip()
            if text.isdigit() and int(text) < fields["MemTotal"]:
                limit = int(text)
    return {"total": fields["MemTotal"], "available": fields.get("MemAvailable"),
            "cgroup_limit": limit}


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's, taskset's or Slurm's share, not the
    host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
