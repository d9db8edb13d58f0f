"""What docs/benchmarks.md says about session 39's 7B series with the checkpoint read through
mappings (2 x H200), held to the raw JSON: the resume equals the uninterrupted run and every rank
read through mappings with nothing left mapped, the cold-compiled runs sampled differently, the
restart times against session 38's whole read and their split, host memory, and the step times
against the plan's prediction for the same layout."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 39)"
KEYS = ("step", "reward_mean", "reward_std", "loss")


def _run(name: str, session: int = 39) -> Any:
    path = RESULTS / f"2026-11-27-7b-resume-{name}-h200x2-session{session}.json"
    return json.loads(path.read_text())


def _steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in KEYS} for r in rows]


def test_the_mapped_resume_equals_the_uninterrupted_run_at_every_step() -> None:
    resumed, second = _run("resumed"), _run("second")
    assert resumed["attempt"]["phase"] == "done" and resumed["attempt"]["step"] == 5
    assert _steps(resumed["steps"]) == _steps(second["steps"])
    assert [r["step"] for r in resumed["steps"]] == [1, 2, 3, 4, 5]
    first = resumed["restarts"][0]
    assert first["cause"] == "user signal" and first["stopped_at_step"] == 2
    assert first["steps_lost"] == 0
    last = second["steps"][-1]
    assert f"step 5: reward {last['reward_mean']}, loss {last['loss']} in both" \
        in docs_section(HEADING)


def test_every_rank_read_through_mappings_and_left_nothing_mapped() -> None:
    lines = _run("resumed")["checkpoint_read"]
    # two resumes (cold, warm) of two ranks each append to the same rank logs
    assert len(lines) == 4 and not any("still mapped" in x for x in lines)
    assert all("3 file(s) mapped (61.9 GiB), 0 read whole" in x for x in lines)
    seconds = [float(re.search(r"([\d.]+) s from the first file's read", x)[1])  # type: ignore[index]
               for x in lines]
    section = docs_section(HEADING)
    assert "`checkpoint read: 3 file(s) mapped (61.9 GiB), 0 read whole`" in section
    assert f"{min(seconds):.1f} to {max(seconds):.1f} s from the first file's read" in section


def test_the_cold_compiled_runs_sampled_differently_and_the_docs_say_so() -> None:
    resumed, cold, second = _run("resumed"), _run("cold"), _run("second")
    reference, uninterrupted = resumed["cold_reference"][0], _steps(second["steps"])[0]
    assert reference["reward_mean"] != uninterrupted["reward_mean"]
    new, (same,) = cold["new_steps"][0], cold["second_run_same_step"]
    assert new["step"] == same["step"] == 3 and not cold["equal_to_second_run"]
    section = docs_section(HEADING)
    assert f"(reward {reference['reward_mean']} against {uninterrupted['reward_mean']})" \
        in section
    assert f"reward {new['reward_mean']} against {same['reward_mean']}, loss {new['loss']:.4f} " \
        f"against {same['loss']:.4f}" in section


def test_the_restart_times_against_the_whole_read_and_their_split() -> None:
    times, before = _run("restart-times"), _run("restart-times", 38)
    cold_s, warm_s = times["cold_s"], times["warm_s"]
    assert cold_s == _run("cold")["attempt"]["first_new_step_s"]
    assert warm_s == _run("resumed")["attempt"]["first_new_step_s"]
    assert warm_s < before["warm_s"] and cold_s < before["cold_s"]
    assert warm_s > 0.5 * cold_s  # the goal is still not met, and the docs say so
    section = docs_section(HEADING).replace("**", "")
    assert f"warm {warm_s} s, cold {cold_s} s: {warm_s / cold_s:.3f}" in section
    assert f"not met, by {warm_s - 0.5 * cold_s:.1f} s" in section
    assert f"{cold_s} s ({before['cold_s']} in session 38) | {warm_s} s ({before['warm_s']})" \
        in section
    startup = _run("startup")
    (fresh,) = startup["second7"]
    _, cold, warm = startup["interrupted7"]
    for part in ("torch_and_group", "trainer", "prepare_and_load", "first_step"):
        row = " | ".join(f"{r['parts_s'][part]:.2f}" for r in (fresh, cold, warm))
        assert row in section, (part, row)
    read = [r["parts_s"]["prepare_and_load"] - fresh["parts_s"]["prepare_and_load"]
            for r in (warm, cold)]
    assert f"costs {read[0]:.1f} s in the warm resume and {read[1]:.1f} s in the cold one" \
        in section
    compile_s = cold["parts_s"]["trainer"] - warm["parts_s"]["trainer"]
    assert f"cold cache costs {compile_s:.1f} s of the trainer part" in section
    assert f"({fresh['total_s']:.1f} s of start-up here) plus about " \
        f"{warm['total_s'] - fresh['total_s']:.0f} s ({warm['total_s']:.1f} s), {read[0]:.1f} of" \
        in section
    fell = [before[k] - times[k] for k in ("warm_s", "cold_s")]
    assert f"fell by {fell[0]:.1f} s (warm) and {fell[1]:.1f} s (cold)" in section
    (_, cold38, warm38) = _run("startup", 38)["interrupted7"]
    read_fell = [r38["parts_s"]["prepare_and_load"] - r["parts_s"]["prepare_and_load"]
                 for r38, r in ((warm38, warm), (cold38, cold))]
    assert f"the read part by {read_fell[0]:.1f} and {read_fell[1]:.1f} s" in section


def test_a_resume_s_host_memory_is_now_about_a_fresh_start_s() -> None:
    section = docs_section(HEADING)
    pss = {s: [_run(n, s)["attempt"]["host_pss_peak_gib"] for n in ("cold", "resumed", "second",
                                                                       "stop")] for s in (38, 39)}
    now, before = pss[39], pss[38]
    assert max(now[:2]) - min(now[2:]) < 3 and min(before[:2]) - max(before[2:]) > 20
    assert f"({now[0]:.1f} / {now[1]:.1f} GiB against {now[2]:.1f} / {now[3]:.1f} for" in section
    assert f"({before[0]:.1f} / {before[1]:.1f} against {before[2]:.1f} / {before[3]:.1f})" \
        in section
    gpu = [_run("resumed", s)["state"]["gpu_mem_train_begin"]["nvml_used_gib"] for s in (38, 39)]
    assert abs(gpu[0] - gpu[1]) < 0.5 and f"{gpu[1]:.1f} GiB NVML" in section


def test_the_step_times_are_calibration_cases_within_the_tolerance() -> None:
    cases = [next(c for c in calibration.CASES if c.name ==
                  f"h200 7B TP1xDP2 ZeRO-2, no recomputation (session 39, {run})")
             for run in ("reference", "second")]
    plan = _run("reference")["plan"]
    assert plan["deepspeed"]["zero_stage"] == 2 and plan["tensor_parallel_size"] == 1
    measured, predicted = [c.measured() for c in cases], cases[0].predicted().seconds
    for run, value in zip(("reference", "second"), measured, strict=True):
        times = [r["step_time"] for r in _run(run)["steps"]][1:]  # steps 2-5
        assert abs(value - sum(times) / len(times)) < 1e-9
    assert all(abs(predicted / m - 1) <= calibration.TOLERANCE for m in measured)
    assert not any(c.name in calibration.MISSES for c in cases)
    section = docs_section(HEADING)
    assert f"{measured[0]:.3f} s/step (reference, steps 2-5) and {measured[1]:.3f} (second " \
        f"run); the plan predicted {predicted:.3f}" in section
    assert calibration.counts_as_of(39) in section


def test_the_prefetch_rows_are_the_cpu_json() -> None:
    section = docs_section("### The checkpoint prefetch (new after the calls")
    for wait in (8, 1):
        run = json.loads((RESULTS / f"2026-11-27-checkpoint-prefetch-4gib-wait{wait}-cold-cpu-"
                                    "session39.json").read_text())
        assert run["wait_s"] == wait and round(run["bytes"] / 2**30, 1) == 4.0
        without, with_ = run["seconds"]["without"], run["seconds"]["with"]
        assert max(with_) < min(without)  # every round, both orders
        row = (f"| {wait} s | {without[0]:.2f}, {without[1]:.2f} | {with_[0]:.2f}, "
               f"{with_[1]:.2f} | **{run['without_over_with']:.2f}x** |")
        assert row in section, row
    eight = json.loads((RESULTS / "2026-11-27-checkpoint-prefetch-4gib-wait8-cold-cpu-session39"
                                  ".json").read_text())
    assert all("4.0 of 4.0 GiB in 1 file(s) in 2.0 s" in x for x in eight["prefetch_lines"])
    without, with_ = eight["seconds"]["without"], eight["seconds"]["with"]  # rounds 1 and 2
    assert f"{without[0] / with_[0]:.1f}x and {without[1] / with_[1]:.1f}x" in section
