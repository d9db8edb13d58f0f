"""bench_gpu.py two: rounds and repeats in one output folder keep every run, and the ratios
pool them (session 31: plan 1.465 then 1.891 s/step, server 2.266 then 2.071, on one loan)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.paths import BENCHMARKS

BENCH = BENCHMARKS / "bench_gpu.py"


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
    results: dict[str, Any] = {"plan": {"step_s": 1.465}, "server": {"step_s": 2.266},
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


def test_each_finished_run_is_handed_on_before_the_next_starts(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 32: a time limit ended bench_gpu.py after its plan run had returned, while the
    server run shut down, and neither reached the JSON. part_two now hands every run that
    returns to ``on_run`` (main writes DIR's JSON there), a failed one too; a run cut off
    before it returns is still lost."""
    started: list[str] = []

    def fake_run(site: Path, steps: int, *extra: str, **kwargs: object) -> dict[str, object]:
        mode = "server" if "server" in extra else "plan"
        started.append(mode)
        if len(started) == 3:
            raise RuntimeError("killed")
        return {"step_s": {"plan": 1.6, "server": 2.4}[mode]}

    monkeypatch.setattr(bench, "gpu_info", lambda: ("H100", 79.0, 2))
    monkeypatch.setattr(bench, "hpc_grpo", fake_run)
    seen: list[tuple[list[str], int]] = []
    done = bench.part_two(tmp_path, ["plan", "server", "plan"], 10, {},
                          on_run=lambda runs: seen.append((list(runs), len(started))))
    assert seen == [(["plan"], 1), (["plan", "server"], 2), (["plan", "server", "plan_2"], 3)]
    assert "error" in done["plan_2"] and done["server"]["step_s"] == 2.4


def test_the_saved_json_is_whole_and_a_failed_save_does_not_stop_the_runs(
        bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bench-two.json"
    bench.save_json(path, {"plan": {"step_s": 1.6}})
    bench.save_json(path, {"plan": {"step_s": 1.6}, "server": {"step_s": 2.4}})
    assert json.loads(path.read_text())["server"]["step_s"] == 2.4
    assert [p.name for p in tmp_path.iterdir()] == ["bench-two.json"]  # no .part left behind
    bench.save_json(tmp_path / "gone" / "bench-two.json", {"plan": {}})  # no folder: printed
    assert "could not save" in capsys.readouterr().err


def test_versions_come_from_package_metadata_without_importing_the_stack(bench: ModuleType) -> None:
    """Importing vllm in the parent would set os.environ values every later run inherits."""
    import sys

    before = set(sys.modules)
    found = bench.versions()
    assert set(found) == {"torch", "trl", "transformers", "vllm"}
    assert not {"vllm", "trl", "transformers"} & (set(sys.modules) - before)


def test_the_7b_side_by_side_runs_force_their_layouts_and_pool_a_ratio(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--shape qwen2-7b --runs plan,tp1_offload,server_offload: the plan's own choice, its TP 1
    offload runner-up, and server mode with its one trainer offloaded (it fits no other way)."""
    calls: list[tuple[str, ...]] = []

    def fake_run(site: Path, steps: int, *extra: str, **kwargs: object) -> dict[str, object]:
        calls.append(extra)
        return {"step_s": 13.4 if "server" in extra else 8.3}

    monkeypatch.setattr(bench, "gpu_info", lambda: ("H100", 79.0, 2))
    monkeypatch.setattr(bench, "hpc_grpo", fake_run)
    done = bench.part_two(tmp_path, ["plan", "tp1_offload", "server_offload"], 6, {})
    offload = ("--zero-stage", "3", "--set=offload_optimizer=true")
    assert calls == [(), ("--tp", "1", *offload), (*offload, "--vllm-mode", "server")]
    bench.ratios(done)
    assert done["ratio_plan_over_server_offload"] == pytest.approx(13.4 / 8.3)
    site = (tmp_path / "gpu2.yaml").read_text()  # host memory read from this machine, not 100
    assert f"cpu_memory_gib: {bench.host_gib():.0f}\n" in site
