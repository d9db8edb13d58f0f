"""What docs/benchmarks.md says about session 48's GPU calls (one H200), held to the raw JSON:
the 7B LoRA chain again with the cold test's new checks passing on a GPU (this time the cold
restart equalled the uninterrupted run), the merged 7B LoRA export read by vLLM, host memory
under optimizer offload at 1.5B on one rank of an H200 against the plan, and a rank's imports on
the GPU machine with the collector paused and running."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
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

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-29 (session 48), GPU"


def _json(name: str) -> Any:
    return json.loads((RESULTS / f"2026-11-29-{name}-h200-session48.json").read_text())


def test_the_warm_chain_equals_the_uninterrupted_runs() -> None:
    assert_warm_chain_equal(48)


def test_the_cold_restart_passes_the_new_checks_and_this_time_equals_the_second_run() -> None:
    cold, second = load("cold", 48), load("second", 48)
    rows = cold_rows(48)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert str(cold["attempts"][1]["resumed_from"]).endswith("checkpoint-2")
    assert_cold_first_step(rows[2], second["rows"])  # the GPU test's own check, on these runs
    assert cold["steps"] == second["steps"][:4]  # unlike session 47, where step 3 moved
    assert cold["logp_gap"] == cold["second_logp_gap"][:4]
    log = cold_rank0_log(48)
    assert log.count("first weight push filled all 198 parameters") == cold["first_push_checks"] == 2
    assert "training from /tmp/w/lora-site/runs/lora7-cold/checkpoints/checkpoint-2" in log


def test_the_two_sessions_cold_compiles_chose_different_numerics_from_step_1() -> None:
    """Same machine kind, same test, same seeds: session 47's and 48's references (each compiled
    cold) generated other completions at step 1, before any restart."""
    ours, theirs = load("reference", 48)["steps"][0], load("reference", 47)["steps"][0]
    assert ours["step"] == theirs["step"] == 1
    assert ours["reward_mean"] != theirs["reward_mean"]


def test_restart_warm_under_half_of_cold() -> None:
    assert_warm_under_half_of_cold(48)


def test_the_merged_export_passed_both_checks() -> None:
    export = _json("export-lora-7b-merged")["export"]
    assert export["exit"] == 0 and "model.safetensors" in export["files"]
    check = export["entry"]["check"]
    assert check["passed"] and check["max_abs_diff"] <= check["tolerance"]
    assert check["rounding"]["merge"]["passed"]
    vllm = check["vllm"]
    assert vllm["passed"] and vllm["mean_abs_diff"] <= vllm["tolerance"]


def test_host_memory_within_ten_percent_of_the_plan() -> None:
    run = _json("memory-offload-1.5b-1rank")
    node = run["host_peak_detail"]["node_used_peak_less_start_gib"]
    assert abs(run["planned_host_gib"] - node) <= 0.10 * node
    assert abs(run["planned_host_gib"] - run["measured_host_pss_peak_gib"]) <= \
        0.10 * run["measured_host_pss_peak_gib"]


def test_the_imports_bench_printed_its_means() -> None:
    bench = _json("bench-rank-imports")
    assert round(mean(bench["running_s"]), 3) == bench["running_mean_s"]
    assert round(mean(bench["paused_s"]), 3) == bench["paused_mean_s"]
    assert round(bench["paused_mean_s"] / bench["running_mean_s"], 3) == bench["paused_over_running"]
    assert len(bench["printed"]) == len(bench["running_s"]) == 4


def test_the_docs_quote_the_json() -> None:
    cold, resumed = load("cold", 48), load("resumed", 48)
    rows = cold_rows(48)
    times = cold["restart_first_new_step_s"]
    export = _json("export-lora-7b-merged")["export"]
    check = export["entry"]["check"]
    host = _json("memory-offload-1.5b-1rank")
    imports = _json("bench-rank-imports")
    quoted = [f"warm **{times['warm']:.1f} s**", f"cold **{times['cold']:.1f} s: "
              f"{cold['warm_over_cold']}**", f"**{rows[2]['vllm_logp_diff_mean']:.4f}**",
              f"({', '.join(f'{t:.1f}' for t in resumed['warm_restart_first_new_step_s'])})",
              f"{export['wall_s']:.1f} s", f"{check['rounding']['merge']['max_abs_diff']:.2e}",
              f"{check['vllm']['mean_abs_diff']:.4f}",
              f"| {host['planned_host_gib']:.2f} |",
              f"| {host['host_peak_detail']['node_used_peak_less_start_gib']:.2f} |",
              f"| {host['measured_host_pss_peak_gib']:.2f} |",
              f"{imports['running_mean_s']:.2f} s", f"{imports['paused_mean_s']:.2f} s",
              f"**{imports['paused_over_running']:.3f}**"]
    for step in load("second", 48)["steps"]:
        quoted.append(f"| {step['step']} | {step['reward_mean']} | {step['loss']:.6f} |")
    section = docs_section(HEADING)
    missing = [q for q in quoted if q not in section]
    assert not missing, missing


def test_the_zero3_checkpoint_was_evaluated_from_its_shards_and_exported() -> None:
    run = _json("export-zero3-offload-1.5b-1rank")
    assert run["ranks"] == 1 and run["source"]["zero_stage"] == 3
    assert "global_step3" in run["checkpoint_files"]
    assert "model.safetensors" not in run["checkpoint_files"]  # the shards alone
    shards = run["eval_shards"]
    assert shards["exit"] == 0 and "--step" in shards["args"]
    assert shards["record"]["engine"] == "transformers"
    assert shards["record"]["subject"]["layout"] == "zero"
    assert run["eval"]["record"]["engine"] == "vllm"
    assert run["eval"]["record"]["subject"]["label"] == "export step-3"  # the export, not the shards
    check = run["export"]["entry"]["check"]
    assert check["passed"] and check["vllm"]["passed"]
    second = _json("memory-offload-1.5b-1rank-second")
    node = second["host_peak_detail"]["node_used_peak_less_start_gib"]
    assert abs(second["planned_host_gib"] - node) <= 0.10 * node
    section = docs_section(HEADING)
    for quoted in (f"{shards['wall_s']:.1f} s, reward mean {shards['record']['reward']['mean']}",
                   f"mean {check['vllm']['mean_abs_diff']:.4f} (tolerance",
                   f"{run['eval']['wall_s']:.1f} s, reward mean "
                   f"{run['eval']['record']['reward']['mean']:.2f}",
                   f"node {node:.2f}, PSS {second['measured_host_pss_peak_gib']:.2f} GiB",
                   f"({run['export']['wall_s']:.1f} s, {run['export']['bytes'] / 1e9:.2f} GB folder)"):
        assert quoted in section, quoted
