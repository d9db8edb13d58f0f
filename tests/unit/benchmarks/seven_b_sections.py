"""Checks shared by the dated 7B resume sections of docs/benchmarks.md (sessions 42 on): each
section quotes its reference's checkpoint against the plan, the saves' rates, the references'
step times and their calibration cases the same way. ``saved(name)`` reads that session's JSON
(``reference``, ``reference-first-hold``, ``stop``) and each restart's row of the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.planner import calibration_cases as calibration

GIB = 1024**3
Saved = Callable[[str], Any]


def _steps_2_to_5(run: dict[str, Any]) -> float:
    return sum(s["step_time"] for s in run["steps"][1:]) / 4


def check_checkpoint_saves_and_step_times(section: str, saved: Saved) -> None:
    ref = saved("reference")
    assert f"**{ref['checkpoint']['gib']} GiB on disk against " \
        f"{ref['checkpoint_bytes_planned'] / GIB:.2f} GiB planned**" in section
    first, stop = saved("reference-first-hold"), saved("stop")
    for run in (ref, stop, first):
        c = run["checkpoint"]
        assert f"{c['gb_per_s']} GB/s" in section and f"{c['save_s']:.1f} s" in section
    means = [_steps_2_to_5(r) for r in (ref, first)]
    assert f"**{means[0]:.3f}** and **{means[1]:.3f}** s/step" in section
    assert f"first step {stop['attempt']['first_new_step_s']} s after" in section
    assert f"{ref['free_gib_after']} GiB free after it" in section


def check_calibration_cases(section: str, saved: Saved, session: int) -> None:
    """The two references are the session's calibration cases, as the section says."""
    cases = [c for c in calibration.CASES if f"(session {session}," in c.name]
    measured = [_steps_2_to_5(saved(r)) for r in ("reference", "reference-first-hold")]
    assert [round(c.measured(), 3) for c in cases] == [round(m, 3) for m in measured]
    errors = [f"{calibration._error(c):+.1%}".replace("%", " %") for c in cases]
    assert f"{errors[0]} and {errors[1]} from the prediction" in section
    assert calibration.counts_as_of(session) in section


def check_restart_row(section: str, label: str, restart: dict[str, Any]) -> None:
    """One restart's row of the section's table: node task start to the first new step, then
    rank 0's start-up parts, from its saved result; a stop-and-resume of checkpoint-2."""
    (line,) = restart["startup"]
    parts, inner = line["parts_s"], line["trainer_parts_s"]
    cells = [restart["attempt"]["first_new_step_s"], parts["torch_and_group"],
             inner["checks_and_inputs"], inner["trainer_import"], inner["model_load"],
             inner["engine_start"], parts["prepare_and_load"], parts["first_step"]]
    assert f"| {label} | {' | '.join(str(c) for c in cells)} |" in section, (label, cells)
    assert restart["attempt"]["phase"] == "interrupted" and line["resumed_from_step"] == 2
