"""How long a rank waits in a collective for its peers: torch.distributed's timeout, planned.

Left alone it was torch's default, 30 minutes for gloo and 10 for NCCL (the ranks start the
process group themselves, so TRL's ``ddp_timeout`` never reached it), whatever the job:
minutes of a held allocation for a 2-second step, or too short for a slow first save of a large
model. A collective waits at most for a peer's step plus a save (ranks step in lockstep), so the
plan allows 4 steps and 2 checkpoints and a minute, measured by the site's newest run of the
job's step-time shape (timing.Timings: its slowest steady step and its save), never under 10
minutes. With nothing measured it allows the watchdog's
start-up allowance: a peer still loading the model or starting its engine is waited for.

The hang watchdog (runtime/node/watchdog.py) is the first line: it ends a stalled attempt with
every rank's stack in the logs, after ``max(watchdog_min_s, 3 x the slowest step)``, which this
timeout exceeds; the timeout is what ends a rank if the watchdog cannot. Pure: values in.
"""

from __future__ import annotations

import math

from hpc_grpo.planner.timing import Timings

FLOOR_S = 600


def collective_timeout(timings: Timings | None, startup_s: int, watchdog_min_s: int,
                       job_s: int | None = None) -> tuple[int, str]:
    """(seconds, why) for the process group's timeout and GRPOConfig's ``ddp_timeout``.

    ``job_s``: a ``ddp_timeout`` the job sets itself, which wins."""
    if job_s:
        return int(job_s), f"{job_s}s: ddp_timeout set by the job"
    floor = max(FLOOR_S, 2 * watchdog_min_s)
    if timings is None:
        value = max(floor, startup_s)
        return value, (f"{value}s: no step measured yet, the watchdog's start-up allowance "
                       f"({startup_s}s, at least {floor}s)")
    needed = math.ceil(4 * timings.step_s + 2 * timings.checkpoint_s + 60)
    if needed <= floor:
        return floor, (f"{floor}s (floor) covers 4 steps ({timings.step_s:.1f}s) and 2 checkpoints "
                       f"({timings.checkpoint_s:.1f}s) measured by {timings.source_run}")
    return needed, (f"{needed}s = 4 x step {timings.step_s:.1f}s + 2 x checkpoint "
                    f"{timings.checkpoint_s:.1f}s + 60s, measured by {timings.source_run}")
