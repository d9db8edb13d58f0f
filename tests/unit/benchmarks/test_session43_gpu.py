"""What docs/benchmarks.md says about session 43's GPU calls (2 x H100) and its CPU import
benchmark, held to the raw JSON: the 7B warm and cold restarts in alternating rounds with their
start-up split, the warm/cold ratio on the rounds' means, the steps equal to the reference's,
the rank logs' lines, the checkpoint against the plan, the save rates and the references' step
times."""

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
HEADING = "## 2026-11-28 (session 43), GPU"
KEYS = ("step", "reward_mean", "reward_std", "loss")


def _json(name: str) -> Any:
    return json.loads((RESULTS / f"2026-11-28-7b-resume-{name}-h100x2-session43.json").read_text())


ROWS = {"warm-round1": "warm, round 1 (right after the stop)", "cold-round1": "cold, round 1",
        "warm-round2": "warm, round 2", "cold-round2": "cold, round 2"}


def test_the_restart_table_is_the_saved_rounds_in_the_order_they_ran() -> None:
    section = docs_section(HEADING)
    started = []
    for name, label in ROWS.items():
        saved = _json(name)
        check_restart_row(section, label, saved)
        assert saved["cache"] == name.split("-")[0] and saved["sync_s"] == 0.0
        started.append(saved["attempt"]["started"])
    assert started == sorted(started)  # warm, cold, warm, cold
    assert "took 0.0 s (nothing was left to write)" in section


def test_the_ratio_is_the_rounds_means() -> None:
    section = docs_section(HEADING)
    times = _json("restart-times")
    warm = [_json(f"warm-round{i}")["attempt"]["first_new_step_s"] for i in (1, 2)]
    cold = [_json(f"cold-round{i}")["attempt"]["first_new_step_s"] for i in (1, 2)]
    assert (times["warm_rounds"], times["cold_rounds"]) == (warm, cold)
    ratio = round(sum(warm) / sum(cold), 3)
    worst = round(max(warm) / min(cold), 3)
    assert (times["warm_over_cold"], times["worst_warm_over_best_cold"]) == (ratio, worst)
    assert (times["warm_s"], times["cold_s"]) == (round(sum(warm) / 2, 1), round(sum(cold) / 2, 1))
    assert f"**Warm over cold: {ratio}** (means {times['warm_s']} against {times['cold_s']} s)" \
        in section
    assert f"fastest cold one: {worst}" in section
    assert max(w / c for w in warm for c in cold) <= 0.5  # "on every pairing"


def test_the_warm_restarts_equal_the_reference_and_the_cold_ones_do_not() -> None:
    section = docs_section(HEADING)
    reference = [{k: r[k] for k in KEYS} for r in _json("reference")["steps"]]
    for i in (1, 2):
        assert _json(f"warm-round{i}")["new_steps"] == reference[2:4]
        assert _json(f"cold-round{i}")["new_steps"][0] != reference[2]
    colds = [_json(f"cold-round{i}")["new_steps"][0]["reward_mean"] for i in (1, 2)]
    assert colds[0] != colds[1] and f"(step 3: {colds[0]} and {colds[1]})" in section
    stopped = [{k: r[k] for k in KEYS} for r in _json("metrics")["stopped_run"]]
    assert stopped[:2] == reference[:2]  # the stop's own steps
    step3, step4 = reference[2], reference[3]
    assert f"step 3 {step3['reward_mean']} and {step3['loss']:.4f}, step 4 " \
        f"{step4['reward_mean']} and {step4['loss']:.4f}" in section


def test_every_rank_of_every_attempt_logged_the_freeze_the_first_push_and_the_mapped_read() -> None:
    section = docs_section(HEADING)
    lines = _json("rank-log-lines")["lines"]
    stopped = [v for k, v in lines.items() if k.startswith("interrupted7/")]
    assert len(stopped) == 2
    for rank in stopped:
        assert sum("objects frozen" in x for x in rank) == 5  # the stop and four restarts
        assert sum("first weight push filled all 198 parameters" in x for x in rank) == 5
        assert sum("3 file(s) mapped (37.1 GiB), 0 read whole" in x for x in rank) == 4
        assert sum("37.1 GiB of it found in the page cache, not copied" in x for x in rank) == 4
    assert "`first weight push filled all 198 parameters of the vLLM engine`" in section
    frozen = [int(x.split("imports done; ")[1].split()[0]) for rank in stopped for x in rank
              if "objects frozen" in x]
    assert f"`imports done; {min(frozen)}-{max(frozen)} objects frozen`" in section


def test_the_checkpoint_saves_and_step_times_are_the_saved_ones() -> None:
    check_checkpoint_saves_and_step_times(docs_section(HEADING), _json)


def test_the_references_are_calibration_cases_as_the_section_says() -> None:
    check_calibration_cases(docs_section(HEADING), _json, 43)



def test_the_rank_imports_table_is_the_saved_runs() -> None:
    section = docs_section("## 2026-11-28 (session 43), CPU")
    runs = json.loads((RESULTS / "2026-11-28-rank-imports-collector-cpu-session43.json").read_text())
    for number, run in enumerate(runs["runs"], 1):
        got = run["result"]
        assert len(got["running_s"]) == len(got["paused_s"]) == run["rounds"]
        assert got["paused_over_running"] == round(
            (sum(got["paused_s"]) / run["rounds"]) / (sum(got["running_s"]) / run["rounds"]), 3)
        assert f"| {number} | {run['rounds']} | {got['running_mean_s']} | {got['paused_mean_s']} " \
            f"| {got['paused_over_running']} |" in section
