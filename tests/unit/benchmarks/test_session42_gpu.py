"""What docs/benchmarks.md says about session 42's GPU calls (2 x H100), held to the raw JSON: the
7B warm and cold restarts with their start-up split, the warm/cold ratios, the checkpoint against
the plan, the save rates and the references' step times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.planner import test_speed_calibration as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 42)"
GIB = 1024**3


def _json(name: str) -> Any:
    return json.loads((RESULTS / f"2026-11-27-7b-resume-{name}-h100x2-session42.json").read_text())


ROWS = {"warm": "warm, round 1 (right after the stop's save)", "cold": "cold (after round 1)",
        "warm-round2": "warm, round 2 (after the cold one)"}


def test_the_restart_table_is_the_saved_attempts() -> None:
    section = docs_section(HEADING)
    for name, label in ROWS.items():
        saved = _json(name)
        (line,) = saved["startup"]
        parts, inner = line["parts_s"], line["trainer_parts_s"]
        cells = [saved["attempt"]["first_new_step_s"], parts["torch_and_group"],
                 inner["checks_and_inputs"], inner["trainer_import"], inner["model_load"],
                 inner["engine_start"], parts["prepare_and_load"], parts["first_step"]]
        assert f"| {label} | {' | '.join(str(c) for c in cells)} |" in section, (name, cells)
        assert saved["attempt"]["phase"] == "interrupted" and line["resumed_from_step"] == 2
    # the table's attempts are the stopped run's, in the order it ran them
    attempts = [a["attempt"] for a in _json("startup")["attempts"]]
    assert attempts[1:] == [_json(n)["startup"][0]["attempt"] for n in ("warm", "cold", "warm-round2")]


def test_the_ratios_are_the_saved_times() -> None:
    section = docs_section(HEADING)
    times = _json("restart-times")
    cold = _json("cold")["attempt"]["first_new_step_s"]
    ratios = [round(_json(n)["attempt"]["first_new_step_s"] / cold, 3) for n in ("warm", "warm-round2")]
    assert [times["round1"]["warm_over_cold"], times["round2"]["warm_over_cold"]] == ratios
    assert f"Warm over cold: {ratios[0]} (round 1) and {ratios[1]} (round 2)" in section
    assert ratios[0] > 0.5 >= ratios[1]  # what the section says of the goal, round by round
    assert f"-k warm_restart` **failed on round 1, {ratios[0]}**" in section
    warm, again = (_json(n)["new_steps"][0] for n in ("warm", "warm-round2"))
    assert warm == again != _json("cold")["new_steps"][0]


def test_the_checkpoint_saves_and_step_times_are_the_saved_ones() -> None:
    section = docs_section(HEADING)
    ref = _json("reference")
    assert f"**{ref['checkpoint']['gib']} GiB on disk against " \
        f"{ref['checkpoint_bytes_planned'] / GIB:.2f} GiB planned**" in section
    first, stop = _json("reference-first-hold"), _json("stop")
    for saved in (ref, stop, first):
        c = saved["checkpoint"]
        assert f"{c['gb_per_s']} GB/s" in section and f"{c['save_s']:.1f} s" in section
    means = [sum(s["step_time"] for s in r["steps"][1:]) / 4 for r in (ref, first)]
    assert f"**{means[0]:.3f}** and **{means[1]:.3f}** s/step" in section
    assert f"first step {stop['attempt']['first_new_step_s']} s after" in section
    assert f"{ref['free_gib_after']} GiB free after it" in section


def test_the_references_are_calibration_cases_as_the_section_says() -> None:
    section = docs_section(HEADING)
    cases = [c for c in calibration.CASES if "(session 42," in c.name]
    measured = [sum(s["step_time"] for s in _json(r)["steps"][1:]) / 4
                for r in ("reference", "reference-first-hold")]
    assert [round(c.measured(), 3) for c in cases] == [round(m, 3) for m in measured]
    errors = [f"{calibration._error(c):+.1%}".replace("%", " %") for c in cases]
    assert f"{errors[0]} and {errors[1]} from the prediction" in section
    assert calibration.counts_as_of(42) in section
