"""bench_gpu.py two: rounds and repeats in one output folder keep every run, and the ratios
pool them (session 31: plan 1.465 then 1.891 s/step, server 2.266 then 2.071, on one loan)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_repeated_run_gets_the_next_free_name(bench: ModuleType) -> None:
    results: dict[str, object] = {"plan": {}, "plan_2": {}, "default_plan": {}}
    assert bench.free_key(results, "plan") == "plan_3"
    assert bench.free_key(results, "server") == "server"
    assert bench.free_key({"server_expandable": {}}, "server") == "server"


def test_ratios_pool_the_rounds_and_skip_failed_runs(bench: ModuleType) -> None:
    results = {"plan": {"step_s": 1.465}, "server": {"step_s": 2.266},
               "server_2": {"step_s": 2.071}, "plan_2": {"step_s": 1.891},
               "server_expandable": {"step_s": 9.0},  # another layout, not a server round
               "default_plan": {"step_s": float("nan"), "error": "failed"},
               "bare_dp2": {"step_s": 1.683}}
    bench.ratios(results)
    pooled = ((2.266 + 2.071) / 2) / ((1.465 + 1.891) / 2)
    assert math.isclose(results["ratio_plan_over_server"], pooled)
    assert "ratio_default_plan_over_server" not in results  # its only run failed
    assert "step_ratio_default_plan_over_bare_dp2" not in results
    assert bench.mean_step(results, "plan") == pytest.approx(1.678)
