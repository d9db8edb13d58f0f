"""What docs/benchmarks.md says about session 40's 7B series (2 x H200: the engine started from
pushed weights, the prefetch with its page-cache check), held to the raw JSON: the resume equals
the uninterrupted run with every rank's engine from random weights, the restart times and their
split, the prefetch from a dropped page cache, the lines each rank logged, step times and saves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hpc_grpo.runs import drift
from hpc_grpo.runtime.rank.engine_weights import NOTE
from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 40)"
KEYS = ("step", "reward_mean", "reward_std", "loss")
PREDICTED_S = 0.844  # the plan's s/step for this layout (the reference's plan.speed)


def _run(name: str, session: int = 40) -> Any:
    return json.loads((RESULTS / f"2026-11-27-7b-resume-{name}-h200x2-session{session}.json").read_text())


def _steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in KEYS} for r in rows]


def _row(label: str) -> list[str]:
    """The cells of the section's markdown table row that starts with ``label``, without bold,
    a trailing " s" or a bracketed comparison."""
    text = (RESULTS.parent / "benchmarks.md").read_text()
    start = text.index(HEADING)
    section = text[start:text.index("\n## ", start)]
    (line,) = [x for x in section.splitlines() if x.startswith(f"| {label} |")]
    return [cell.replace("*", "").split(" (")[0].strip().removesuffix(" s")
            for cell in line.split("|")[2:-1]]


def test_the_resume_equals_the_uninterrupted_run_with_the_engines_from_pushed_weights() -> None:
    resumed, second = _run("resumed"), _run("second")
    assert resumed["attempt"]["phase"] == "done" and _steps(resumed["steps"]) == _steps(second["steps"])
    assert resumed["engine"] == [f"[train] {NOTE}"] * 2  # both ranks, this attempt
    diffs = resumed["logp_diff"][2:]  # the resumed steps 3-5
    assert not [d for d in diffs if drift.exceeds(d)]
    assert diffs == [r["vllm_logp_diff_mean"] for r in second["steps"]][2:]
    last = second["steps"][-1]
    section = docs_section(HEADING)
    assert f"step 5: reward {last['reward_mean']}, loss {last['loss']} in both" in section
    assert f"{min(diffs):.4f}-{max(diffs):.4f} nats" in section
    weights = json.loads((RESULTS / "2026-11-27-weights-reach-vllm-healthy-dummy-engine-h200x2-"
                                     "session40.json").read_text())
    assert weights["engine_lines"] == [f"[train] {NOTE}"] and weights["phase"] == "done"
    assert f"step 1 at {weights['steps'][0]['vllm_logp_diff_mean']:.4f} nats" in section


def test_restart_times_host_memory_and_the_ratio() -> None:
    section = docs_section(HEADING)
    page = _run("page-cache")
    attempts = [_run("second")["attempt"], _run("stop")["attempt"], _run("cold")["attempt"],
                page["without"]["attempt"], page["with"]["attempt"], _run("resumed")["attempt"]]
    assert _row("node task start to first (new) step") == [
        f"{a['first_new_step_s']:.1f}" for a in attempts]
    assert _row("host RSS / PSS peak (GiB)") == [
        f"{a['host_rss_peak_gib']:.2f} / {a['host_pss_peak_gib']:.2f}" for a in attempts]
    times = _run("restart-times")
    assert times["warm_over_cold"] == round(times["warm_s"] / times["cold_s"], 3)
    assert f"warm {times['warm_s']} s, cold {times['cold_s']} s: {times['warm_over_cold']:.3f}" \
        in section
    old = _run("restart-times", 39)
    assert f"(session 39: {old['warm_s']} / {old['cold_s']} = {old['warm_over_cold']})" in section
    shared = 2 * times["warm_s"] - times["cold_s"]
    assert f"x >= 2 x {times['warm_s']} - {times['cold_s']} = {shared:.1f} s" in section


def test_the_start_up_split_of_each_attempt() -> None:
    section = docs_section(HEADING)
    lines = _run("startup")["interrupted7"]
    assert [x["resumed_from_step"] for x in lines] == [None, 2, 2, 2, 2]  # stop, cold, page x2, warm
    parts = {"torch and process group": ("parts_s", "torch_and_group"),
             "trainer": ("parts_s", "trainer"),
             "of it: vLLM engine start": ("trainer_parts_s", "engine_start"),
             "of it: model load": ("trainer_parts_s", "model_load"),
             "prepare and load (DeepSpeed, checkpoint read)": ("parts_s", "prepare_and_load"),
             "first step": ("parts_s", "first_step")}
    for label, (group, key) in parts.items():
        assert _row(label) == [str(x[group][key]) for x in lines], label
    assert _row("total") == [str(x["total_s"]) for x in lines]
    warm = lines[-1]
    outside = warm["parts_s"]["trainer"] - sum(warm["trainer_parts_s"].values())
    assert f"= {outside:.2f})" in section


def test_the_prefetch_lines_each_rank_logged() -> None:
    section = docs_section(HEADING)
    ranks = _run("rank-lines")["ranks"]
    with_prefetch = {rank: next(x["lines"] for x in ranks[rank] if x["attempt"].endswith("prefetch on"))
                     for rank in ("0", "1")}
    assert "49.5 of 49.5 GiB in 2 file(s) in 81.9 s" in with_prefetch["0"][1]
    assert "37.1 of 37.1 GiB in 1 file(s) in 74.0 s" in with_prefetch["1"][1]
    read = [re.search(r"([\d.]+) s from the first file's read", with_prefetch[r][2])[1]  # type: ignore[index]
            for r in ("0", "1")]
    assert f"to {read[0]} (rank 0) and {read[1]} s (rank 1)" in section
    assert "read 49.5 GiB (rank 0: the shared module states and its partition) in 81.9 s and " \
           "37.1 GiB in 74.0 s" in section
    off = [x["lines"] for rank in ("0", "1") for x in ranks[rank] if x["attempt"].endswith("off")]
    assert all("58.0 s from the first file's read" in lines[-1] for lines in off) and len(off) == 2
    warm = ranks["1"][-1]["lines"][1]
    quoted = "37.1 of 37.1 GiB in 1 file(s) in 0.3 s"
    assert quoted in warm and quoted in section
    assert "37.1 GiB of it found in the page cache, not copied" in warm
    assert "1 file(s) over its memory share not read" in ranks["0"][-1]["lines"][1]
    assert "0.0 of 0.0 GiB in 0 file(s)" in ranks["1"][1]["lines"][1]  # the cold-cache resume
    assert "(-18.6 s)" in section and round(page_delta(), 1) == -18.6


def page_delta() -> float:
    page = _run("page-cache")
    return float(page["with"]["attempt"]["first_new_step_s"] - page["without"]["attempt"]["first_new_step_s"])


def test_step_times_and_saves() -> None:
    section = docs_section(HEADING)
    reference, second = _run("reference"), _run("second")
    assert reference["plan"]["speed"]["s_per_step"] == PREDICTED_S
    means = [sum(r["step_time"] for r in run["steps"][1:]) / 4 for run in (reference, second)]
    assert f"{means[0]:.3f} s/step (reference, steps 2-5) and {means[1]:.3f} (second run)" in section
    assert f"({means[0] / PREDICTED_S - 1:+.0%}, {means[1] / PREDICTED_S - 1:+.0%})" \
        .replace("%", " %") in section
    cases = [next(c for c in calibration.CASES if c.name ==
                  f"h200 7B TP1xDP2 ZeRO-2, no recomputation (session 40, {run})")
             for run in ("reference", "second")]
    assert [c.measured() for c in cases] == means and round(cases[0].predicted().seconds, 3) == PREDICTED_S
    assert not any(c.name in calibration.MISSES for c in cases)
    assert calibration.counts_as_of(40) in section
    saves = [reference["checkpoint"], second["checkpoint"], _run("stop")["checkpoint"]]
    assert f"{saves[0]['gb_per_s']} GB/s (reference), {saves[1]['gb_per_s']} (second), " \
           f"{saves[2]['gb_per_s']} (stop: {saves[2]['folder']}, {saves[2]['gib']} GiB)" in section
