"""What docs/benchmarks.md says about session 47's GPU calls (one H200), held to the raw JSON:
the 7B LoRA warm chain equal to the uninterrupted runs, the cold-cache restart that generated
other completions at once yet passes the cold test's variant-independent checks, the warm/cold
ratio, and the plan's 7B layout on one GPU beside bare TRL with its predicted step time."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean, median
from typing import Any

from tests.gpu.lora_7b_helpers import assert_cold_first_step
from tests.unit.benchmarks.lora_results import (
    assert_warm_chain_equal,
    assert_warm_under_half_of_cold,
    cold_rank0_log,
    cold_rows,
    docs_section,
    load,
)
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-28 (session 47), GPU"
BENCH = "2026-11-28-bench-one-7b-hpc-bare-h200-session47.json"


def _bench() -> dict[str, Any]:
    return json.loads((RESULTS / BENCH).read_text())


def test_the_warm_chain_and_the_cold_reference_equal_the_second_run() -> None:
    assert_warm_chain_equal(47)  # the cold-compiled reference too, unlike sessions 34-35


def test_the_cold_restart_moved_step_3_and_passes_the_variant_free_checks() -> None:
    cold, second = load("cold", 47), load("second", 47)
    assert cold["steps"][:2] == second["steps"][:2]
    assert cold["steps"][2]["reward_mean"] != second["steps"][2]["reward_mean"]
    assert str(cold["attempts"][1]["resumed_from"]).endswith("checkpoint-2")
    rows = cold_rows(47)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [{k: r[k] for k in ("step", "reward_mean", "loss")} for r in rows] == [
        {k: s[k] for k in ("step", "reward_mean", "loss")} for s in cold["steps"]]
    assert_cold_first_step(rows[2], second["rows"])  # the GPU test's own check, on these runs
    log = cold_rank0_log(47)
    assert log.count("first weight push filled all 198 parameters") == 2
    assert "training from /tmp/w/lora-site/runs/lora7-cold/checkpoints/checkpoint-2" in log


def test_restart_warm_under_half_of_cold() -> None:
    assert_warm_under_half_of_cold(47)


def test_hpc_grpo_beside_bare_trl_and_the_ratios_the_bench_printed() -> None:
    bench = _bench()
    hpc = [bench[f"hpc_grpo_{n}"]["step_s"] for n in (1, 2, 3)]
    bare = [bench[f"bare_trl_{n}"]["step_s"] for n in (2, 3)]
    assert round(mean(hpc) / mean(bare), 3) == round(bench["step_ratio_hpc_over_bare"], 3) == 0.979
    medians = [bench[f"hpc_grpo_{n}"]["step_median_s"] for n in (1, 2, 3)]
    bare_medians = [bench[f"bare_trl_{n}"]["step_median_s"] for n in (2, 3)]
    assert abs(median(medians) / median(bare_medians) - 1) <= 0.02
    planned = bench["hpc_grpo_1"]["planned"]
    assert (planned["zero_stage"], planned["enable_sleep_mode"], planned["tensor_parallel_size"],
            planned["gradient_checkpointing"]) == (0, True, 1, True)
    assert "offloaded state needs 126 GiB" in bench["planned_b"]["error"] or \
        bench["planned_b"]["step_s"] != bench["planned_b"]["step_s"]  # refused (NaN s/step)


def test_the_step_time_model_holds_the_four_runs_within_2_1_percent() -> None:
    cases = [c for c in calibration.CASES if "(session 47," in c.name]
    assert len(cases) == 4
    for case in cases:
        assert abs(case.predicted().seconds / case.measured() - 1) <= 0.021, case.name


def test_the_docs_quote_the_json() -> None:
    bench, cold = _bench(), load("cold", 47)
    rows = cold_rows(47)
    times = cold["restart_first_new_step_s"]
    quoted = [f"warm **{times['warm']:.1f} s**", f"cold **{times['cold']:.1f} s: "
              f"{cold['warm_over_cold']}**", f"**{rows[2]['vllm_logp_diff_mean']:.4f}**",
              f"**-13.75, {cold['steps'][2]['loss']:.6f}**",
              f"0.979 on the means, {bench['step_ratio_medians_hpc_over_bare']:.3f} on the medians",
              f"pairings {bench['step_ratio_lowest_pairing']:.3f}-"
              f"{bench['step_ratio_highest_pairing']:.3f}"]
    for key in ("hpc_grpo_1", "bare_trl_2", "hpc_grpo_2", "planned_a", "bare_trl_3", "hpc_grpo_3"):
        run = bench[key]
        quoted.append(f"| {key} | {run['step_s']:.3f} | {run['step_median_s']:.3f} |")
    section = docs_section(HEADING)
    missing = [q for q in quoted if q not in section]
    assert not missing, missing
