"""CPU seconds each test spends, its own and its finished child processes' (``pytest -p
tests.cpu_usage``): what a 2-core CI pays for it, where wall time under load says little. Fixtures
are charged to the first test that sets them up. Written to ``$HPC_GRPO_CPU_USAGE`` (JSON lines:
test id, user and system seconds, wall seconds, and the whole machine's CPU seconds over the test
from /proc/stat: what a cluster test's Slurm jobs spent too, where nothing else runs) when set,
and the 15 heaviest printed at the end."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator

import pytest

_rows: list[tuple[str, float, float]] = []


def _machine_cpu() -> float:
    """Every CPU's busy seconds since boot (/proc/stat: all but idle and iowait), 0 elsewhere."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def _cpu() -> float:
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    cpu, wall, machine = _cpu(), time.perf_counter(), _machine_cpu()
    yield
    row = (item.nodeid, round(_cpu() - cpu, 2), round(time.perf_counter() - wall, 2))
    _rows.append(row)
    path = os.environ.get("HPC_GRPO_CPU_USAGE")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"test": row[0], "cpu_s": row[1], "wall_s": row[2],
                                  "machine_cpu_s": round(_machine_cpu() - machine, 2)}) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.section("CPU seconds (own and children's), heaviest 15")
    for nodeid, cpu, wall in sorted(_rows, key=lambda r: -r[1])[:15]:
        terminalreporter.write_line(f"{cpu:8.1f} cpu s {wall:8.1f} wall s  {nodeid}")
    terminalreporter.write_line(f"{sum(r[1] for r in _rows):8.1f} cpu s in all")
