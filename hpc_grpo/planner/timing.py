"""How much warning a job asks Slurm for, from what an earlier run of the same shape measured.

Pure: the site's past runs' measurements come in as values (the launcher reads them through the
run directory's typed reads, runs/registry.py ``site_measurements``).

Which run calibrates the lead: the newest run on the site of the plan's step-time shape
(rundir/steps.py ``step_shape``), the same run the plan's step time is taken from
(planner/step_source.py), not a run whose id starts with the job's name. The shape is what sets
a step's time and a checkpoint's size: a renamed job of the same shape has the same step and
save, while a job that kept its name but changed its model, nodes or batch does not, and its
old figures would size the lead wrong (a save of a larger model cut off by the time limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpc_grpo.rundir.steps import MeasuredStep


@dataclass(frozen=True)
class Timings:
    """Measured by an earlier run of the plan's shape on the same site: its slowest steady step
    and its checkpoint's seconds (state.json)."""

    checkpoint_s: float
    step_s: float
    source_run: str


def lead_timings(measured: MeasuredStep | None) -> Timings | None:
    """The timings of the measurement of the plan's shape (``rundir.steps.measured_at``): the
    slowest of its steady steps, the step a stop may find in flight, and its checkpoint's
    seconds; None where no run of the shape measured a save."""
    if measured is None or not measured.checkpoint_s:
        return None
    return Timings(measured.checkpoint_s, measured.steady.slowest, measured.run_id)


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


def limit_warnings(time: str, time_min: int, lead: int, timings: Timings | None) -> list[str]:
    """What the site can run but should not: a time limit (``time`` as asked) too short for the
    measured step and save, or no longer than the lead (the stop is asked for at once)."""
    warnings: list[str] = []
    if timings is not None and time_min * 60 < timings.step_s + timings.checkpoint_s:
        warnings.append(
            f"time limit {time} is shorter than one step ({timings.step_s:.0f}s) plus one "
            f"checkpoint ({timings.checkpoint_s:.0f}s) measured by {timings.source_run}: no progress "
            "can be saved")
    if time_min * 60 <= lead:
        warnings.append(
            f"time limit {time} is not longer than the signal lead {lead}s:"
            " the job will be asked to checkpoint right away"
        )
    return warnings
