"""What docs/benchmarks.md says about session 41's GPU calls (2 x H100), held to the raw JSON:
the first-push check's line in every run of the weights test and its per-step differences, the
7B runs' step times and start-up split, and the bytecode cache's import times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpc_grpo.runs import drift
from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 41)"
WEIGHTS = {"healthy": "ZeRO-3, healthy", "stale": "ZeRO-3, push skipped",
           "lora-healthy": "LoRA, healthy", "lora-stale": "LoRA, push skipped"}


def _json(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def test_every_weights_run_says_the_first_push_filled_the_engine_and_the_table_is_its_own() -> None:
    section = docs_section(HEADING)
    for key, label in WEIGHTS.items():
        run = _json(f"2026-11-27-weights-reach-vllm-{key}-first-push-h100x2-session41.json")
        assert run["phase"] == "done"
        assert "[train] first weight push filled all 170 parameters of the vLLM engine" in \
            run["engine_lines"]
        diffs = [s["vllm_logp_diff_mean"] for s in run["steps"]]
        assert f"| {label} | {', '.join(f'{d:.4f}' for d in diffs)} |" in section
        stale = "stale" in key
        assert any(drift.exceeds(d) for d in diffs[1:]) == stale and not drift.exceeds(diffs[0])


def _steps_2_to_5(run: str) -> float:
    steps = _json(f"2026-11-27-7b-resume-{run}-h100x2-session41.json")["steps"]
    return sum(s["step_time"] for s in steps[1:]) / len(steps[1:])


def test_the_7b_step_times_and_start_up_split_are_the_saved_ones() -> None:
    section = docs_section(HEADING)
    assert f"**{_steps_2_to_5('reference'):.3f}** (reference)" in section
    assert f"**{_steps_2_to_5('second'):.3f}** (second)" in section
    cases = [c for c in calibration.CASES if "(session 41," in c.name]
    assert [round(c.measured(), 3) for c in cases] == [round(_steps_2_to_5(r), 3)
                                                       for r in ("reference", "second")]
    errors = [f"{calibration._error(c):+.1%}".replace("%", " %") for c in cases]
    assert f"{errors[0]} and {errors[1]} from the prediction" in section
    assert calibration.counts_as_of(41) in section
    startup = _json("2026-11-27-7b-startup-profiled-h100x2-session41.json")
    (cold,), (warm,) = startup["ref7"], startup["second7"]
    engine = [r["trainer_parts_s"]["engine_start"] for r in (cold, warm)]
    for line in (f"| total | {cold['total_s']} | {warm['total_s']} |",
                 f"| trainer: engine start | {engine[0]} | {engine[1]} |"):
        assert line in section, line
    rest = [round(r["parts_s"]["trainer"] - sum(r["trainer_parts_s"].values()), 2) for r in (cold, warm)]
    assert f"| trainer: the rest | {rest[0]} | {rest[1]} |" in section
    profile = (RESULTS / "2026-11-27-7b-startup-profile-second-h100x2-session41.txt").read_text()
    assert "12.610" in profile and "Python compiling source, 12.61 s" in section


def test_the_bytecode_cache_import_times_are_the_saved_ones() -> None:
    section = docs_section(HEADING)
    saved = _json("2026-11-27-bytecode-cache-imports-h100x2-session41.json")
    plain, cached = saved["seconds"]["plain"], saved["seconds"]["cache"]
    assert f"| as the ranks ran until now | {', '.join(map(str, plain))} |" in section
    assert f"{cached[0]}, **{cached[1]}, {cached[2]}**" in section
    assert min(plain) - max(cached[1:]) > 10  # the saving the section rounds to 12.5 s
    assert saved["probe"]["without_bytecode"] == ["vllm", "trl", "deepspeed", "torch"]
