"""What docs/benchmarks.md says about session 49's GPU calls (one H200), held to the raw JSON: a
rank's imports with the ranks' bytecode cache against the same imports as installed, and the
one-GPU tests that ran on the code of the day."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from tests.unit.benchmarks.lora_results import docs_section

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-29 (session 49), GPU"


def _json(name: str) -> Any:
    return json.loads((RESULTS / f"2026-11-29-{name}-h200-session49.json").read_text())


@pytest.mark.parametrize("environment", ["bytecode_cache", "as_installed"])
def test_each_bench_s_means_and_ratio_follow_from_its_rounds(environment: str) -> None:
    bench = _json("bench-rank-imports")[environment]
    assert round(mean(bench["running_s"]), 3) == bench["running_mean_s"]
    assert round(mean(bench["paused_s"]), 3) == bench["paused_mean_s"]
    assert round(bench["paused_mean_s"] / bench["running_mean_s"], 3) == bench["paused_over_running"]
    rounds = [line for line in bench["printed"] if line.startswith("round ")]
    assert len(rounds) == len(bench["running_s"]) == len(bench["paused_s"])
    assert bench["as_installed"] is (environment == "as_installed")
    assert bool(bench["bytecode_env"]) is (environment == "bytecode_cache")


def test_the_bytecode_cache_at_least_halves_the_imports() -> None:
    both = _json("bench-rank-imports")
    cached, installed = both["bytecode_cache"], both["as_installed"]
    assert "PYTHONPYCACHEPREFIX" in cached["bytecode_env"]
    assert cached["running_mean_s"] <= 0.5 * installed["running_mean_s"]
    assert cached["paused_mean_s"] <= 0.5 * installed["paused_mean_s"]
    # every cached round beat every round compiled from source, not the means alone
    assert max(cached["running_s"] + cached["paused_s"]) < min(installed["running_s"]
                                                               + installed["paused_s"])


def test_the_one_gpu_tests_passed_and_only_the_two_gpu_ones_skipped() -> None:
    runs = _json("gpu-tests")["runs"]
    assert all(not run["failed"] for run in runs)
    passed = [name for run in runs for name in run["passed"]]
    assert len(passed) == len(set(passed)) == 8
    skipped = [line for run in runs for line in run["skipped"]]
    assert skipped and all(line.endswith("needs 2 CUDA GPUs") for line in skipped)


def test_the_docs_quote_the_json() -> None:
    both = _json("bench-rank-imports")
    cached, installed = both["bytecode_cache"], both["as_installed"]
    section = docs_section(HEADING)
    quoted = []
    for bench in (cached, installed):
        quoted += [f"| {len(bench['running_s'])} | {bench['running_mean_s']:.2f} s | "
                   f"{bench['paused_mean_s']:.2f} s | **{bench['paused_over_running']:.3f}** |"]
    quoted += [f"**With the cache the imports take "
               f"{cached['running_mean_s'] / installed['running_mean_s']:.2f}x the time (running) "
               f"and {cached['paused_mean_s'] / installed['paused_mean_s']:.2f}x (paused)**",
               f"The cached paused import, {cached['paused_mean_s']:.2f} s",
               f"worth {cached['running_mean_s'] - cached['paused_mean_s']:.1f} s (cached) and "
               f"{installed['running_mean_s'] - installed['paused_mean_s']:.1f} s (as installed)"]
    for run in _json("gpu-tests")["runs"]:
        for name, seconds in run["call_durations_s"].items():
            quoted.append(f"{seconds:.1f} s")
            assert name in run["passed"]
    passed = sum(len(run["passed"]) for run in _json("gpu-tests")["runs"])
    quoted.append(f"**{passed} passed, 0 failed**")
    missing = [q for q in quoted if q not in section]
    assert not missing, missing
