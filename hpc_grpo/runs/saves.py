"""Each checkpoint save's measured time beside the plan's prediction (issue #59).

The plan predicts one save from the busiest node's bytes over the output file system's write
bandwidth (planner/save_time.py) and records it in run.json (``predicted_save_s``, with the
bandwidth and whether it was measured, declared or assumed); rank 0 appends each completed save
to saves.jsonl (rundir/ledgers.py). ``status RUN`` shows one line of the two, ``status --json``
the figures. A measured save runs from the step's end to the completion marker, so it holds what
the prediction leaves out (the copy to host memory, serialization, the wait for every rank, the
marker and retention): a measured time well above the prediction says which way the plan errs,
and by how much, for the next plan on that file system.

All saves of the run count, across attempts and resumes: run.json is the newest attempt's, so
after ``resume --nodes`` the earlier saves were made at another layout than the one predicted.
A run directory written before the ledger has at most state.json's last save (``checkpoint_seconds``),
shown as such.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.rundir import finite_number, ledgers
from hpc_grpo.rundir.contract import SAVES_JSONL, RunRecord
from hpc_grpo.rundir.state import RunState


def seconds(value: float) -> str:
    """A save's seconds: one decimal from a second up, two figures below (a tiny model's save
    on a CPU site takes milliseconds, and its prediction less)."""
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def _spread(values: tuple[float, ...]) -> str:
    """'4.6 s' for one value; '4.1-5.0 s each (median 4.6 s)' for several."""
    if len(values) == 1:
        return f"{seconds(values[0])} s"
    return (f"{seconds(min(values))}-{seconds(max(values))} s each "
            f"(median {seconds(statistics.median(values))} s)")


@dataclass(frozen=True)
class SaveTimes:
    """A run's measured saves (``measured``: each one's seconds, oldest first; ``held``: the
    training time held, of the saves that record one) and the plan's prediction, if any."""

    measured: tuple[float, ...] = ()
    held: tuple[float, ...] = ()
    predicted: float | None = None
    gbs: float | None = None  # the write bandwidth a node the prediction assumed
    source: str = ""  # "measured", "declared", "assumed" ("" unknown)
    from_state: bool = False  # no ledger: state.json's last save (a run of an earlier release)

    @property
    def median(self) -> float | None:
        return statistics.median(self.measured) if self.measured else None

    def line(self) -> str:
        """'saves: 3 saves, 4.1-5.0 s each (median 4.6 s) against 3.8 s predicted (+21%), at 2
        GB/s a node (assumed)', then '; training held ...' where saves record it (an asynchronous
        save holds training less than it takes); "" without a measured save."""
        median = self.median
        if median is None:
            return ""
        if self.from_state:
            head = (f"saves: the last save {seconds(median)} s (state.json; no {SAVES_JSONL}"
                    ": written before hpc-grpo kept each save)")
        else:
            count = len(self.measured)
            head = f"saves: {count} save{'s' * (count != 1)}, {_spread(self.measured)}"
        held = f"; training held {_spread(self.held)}" if self.held else ""
        if not self.predicted:
            return head + ", no prediction (an unknown architecture, or run.json written before it)" \
                + held
        against = f" against {seconds(self.predicted)} s predicted ({median / self.predicted - 1:+.0%})"
        if self.gbs:
            against += f", at {self.gbs:g} GB/s a node" + (f" ({self.source})" if self.source else "")
        return head + against + held


def save_times(run_dir: Path, record: RunRecord | None, state: RunState) -> SaveTimes:
    """The run's saves (saves.jsonl, else state.json's last) and run.json's prediction."""
    lines = ledgers.saves(run_dir)
    measured = tuple(line.seconds for line in lines)
    last = finite_number(state.checkpoint_seconds)
    from_state = not measured and last is not None and last >= 0
    if from_state and last is not None:
        measured = (last,)
    return SaveTimes(
        measured=measured, held=tuple(line.held_s for line in lines if line.held_s is not None),
        predicted=record.predicted_save_s if record else None,
        gbs=record.save_write_gbs if record else None,
        source=record.save_write_source if record else "", from_state=from_state)
