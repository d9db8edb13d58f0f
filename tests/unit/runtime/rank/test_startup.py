"""runtime/rank/startup.py: the kernel's start time of a process and the parts of a line."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hpc_grpo.runtime.rank import startup


def test_process_start_is_the_kernel_s() -> None:
    """A child started now reports a start within a second of now, not its interpreter's
    first line (it sleeps 1.5 s before asking) and not the fallback (-1)."""
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "import time; time.sleep(1.5); "
         "from hpc_grpo.runtime.rank.startup import process_start_time as p; print(p(-1.0))"],
        capture_output=True, text=True, check=True, env={**os.environ}).stdout
    started = float(out)
    assert before - 0.5 <= started <= before + 1.0, (before, started)


def test_parts_follow_the_marks_in_order() -> None:
    clock = startup.StartupClock(main_started=100.0)
    clock.marks = [90.0, 100.0, 103.0, 140.5, 150.25, 154.0]
    line = clock.line("slurm-7.1", 30)
    assert line["parts_s"] == {"imports": 10.0, "torch_and_group": 3.0, "trainer": 37.5,
                               "prepare_and_load": 9.75, "first_step": 3.75}
    assert (line["total_s"], line["resumed_from_step"], line["attempt"]) == (64.0, 30, "slurm-7.1")


def test_a_line_before_every_mark_names_only_the_parts_taken() -> None:
    clock = startup.StartupClock(main_started=time.time())
    clock.mark()
    assert list(clock.line("a", None)["parts_s"]) == ["imports", "torch_and_group"]
