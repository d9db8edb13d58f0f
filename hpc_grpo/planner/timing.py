"""How much warning a job asks Slurm for, from what an earlier run of the same job measured.

Pure: the measured timings come in as a value (the launcher reads them from the run registry).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Measured by an earlier run of the same job on the same site (its state.json)."""

    checkpoint_s: float
    step_s: float
    source_run: str


SAVE_MARGIN = 1.5  # the checkpoint's time again by half: a save slower than measured or predicted
MARGIN_S = 30  # and the stop's own steps: the agreement across ranks, the exit


def lead_needed(step_s: float, checkpoint_s: float) -> int:
    """Whole seconds of warning a stop needs: the step in flight, the checkpoint with half of
    it again, and 30 s; the one rule for a measured lead (signal_lead) and a predicted one
    (planner/save_time.py)."""
    return int(step_s + SAVE_MARGIN * checkpoint_s + MARGIN_S + 0.999)


def signal_lead(site_lead_s: int, timings: Timings | None) -> tuple[int, str]:
    """Seconds of warning the job asks Slurm for before its time limit or a preemption kill.

    Enough for the step in flight plus one checkpoint, with half the checkpoint again and 30 s
    as margin; never less than the profile's own lead.
    """
    if timings is None:
        return site_lead_s, f"{site_lead_s}s from the site profile (no measured checkpoint yet)"
    needed = lead_needed(timings.step_s, timings.checkpoint_s)
    if needed <= site_lead_s:
        return site_lead_s, (f"{site_lead_s}s from the profile covers a step ({timings.step_s:.1f}s) and a "
                             f"checkpoint ({timings.checkpoint_s:.1f}s) measured by {timings.source_run}")
    return needed, (f"{needed}s = step {timings.step_s:.1f}s + 1.5 x checkpoint {timings.checkpoint_s:.1f}s "
                    f"+ 30s, measured by {timings.source_run}")
