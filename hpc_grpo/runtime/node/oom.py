"""Was a process of this node's job killed by the kernel's OOM killer? (stdlib only)

A rank the OOM killer ends dies by SIGKILL: it writes nothing, torchrun only reports exit code
-9, and state.json would stay at ``phase: training`` (a 7B save on an H200, issue #15). The
kernel counts such kills per cgroup: cgroup v2's ``memory.events`` line ``oom_kill N`` (it
counts the cgroup's descendants too, so torchrun's workers are in the node task's count), and
cgroup v1's ``memory.oom_control`` has the same line. The node task reads the counter of its
own cgroup before starting torchrun and after it exits; a rise means an OOM kill. Slurm's own
record of it (sacct ``OUT_OF_MEMORY``) comes from the same counter.
"""

from __future__ import annotations

from pathlib import Path

CAUSE = "out of memory"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def counter_file(proc_cgroup: str, root: Path = CGROUP_ROOT) -> Path | None:
    """The file that counts OOM kills for the cgroup /proc/self/cgroup names, v2 first."""
    v1 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            candidate = root / path.lstrip("/") / "memory.events"
            if candidate.exists():
                return candidate
        elif "memory" in controllers.split(","):
            v1 = root / "memory" / path.lstrip("/") / "memory.oom_control"
    return v1 if v1 is not None and v1.exists() else None


def oom_kills(text: str) -> int | None:
    """The ``oom_kill`` count in a memory.events / memory.oom_control text, None if absent."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def read_kills(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
               ) -> tuple[int | None, str]:
    """This process's cgroup OOM-kill count and the file it came from; (None, "") if unknown."""
    try:
        path = counter_file(proc_cgroup.read_text(), root)
        return (oom_kills(path.read_text()), str(path)) if path else (None, "")
    except OSError:
        return None, ""


def killed_line(before: int | None, after: int | None, where: str, host: str) -> str:
    """One line for state.json when the count rose while torchrun ran, else ""."""
    if before is None or after is None or after <= before:
        return ""
    count = after - before
    return (f"the kernel's OOM killer ended {count} process{'es' if count > 1 else ''} of this job "
            f"on {host} (oom_kill {before} -> {after} in {where})")
