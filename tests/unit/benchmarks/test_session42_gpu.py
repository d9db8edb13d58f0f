"""What docs/benchmarks.md says about session 42's GPU calls (2 x H100), held to the raw JSON: the
7B warm and cold restarts with their start-up split, the warm/cold ratios, the checkpoint against
the plan, the save rates and the references' step times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.benchmarks.seven_b_sections import (
    check_calibration_cases,
    check_checkpoint_saves_and_step_times,
    check_restart_row,
)

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 42)"


def _json(name: str) -> Any:
    return json.loads((RESULTS / f"2026-11-27-7b-resume-{name}-h100x2-session42.json").read_text())


ROWS = {"warm": "warm, round 1 (right after the stop's save)", "cold": "cold (after round 1)",
        "warm-round2": "warm, round 2 (after the cold one)"}


def test_the_restart_table_is_the_saved_attempts() -> None:
    section = docs_section(HEADING)
    for name, label in ROWS.items():
        saved = _json(name)
        check_restart_row(section, label, saved)
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
    check_checkpoint_saves_and_step_times(docs_section(HEADING), _json)


def test_the_references_are_calibration_cases_as_the_section_says() -> None:
    check_calibration_cases(docs_section(HEADING), _json, 42)
