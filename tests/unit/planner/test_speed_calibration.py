"""The step-time model (planner/speed/) held to every saved GPU measurement of a layout.

Each case rebuilds the PlanRequest of a measured run (shape, ranks, batch, lengths, card, link)
and its layout, and the model's s/step must be within 20 % of the measured mean (steps 2..N),
except the cases listed in MISSES with their reasons (held to 40 %).
Measured values come from the raw JSON in docs/results/ where it exists; the few figures that
exist only in markdown are the MARKDOWN rows (calibration_cases.py), each citing its file and
table. A perturbed model (training throughput halved, or the link 10x faster) must fail the same
check, so the check can fail.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpc_grpo.planner.memory.estimate import Layout
from hpc_grpo.planner.speed import terms
from tests.paths import RESULTS
from tests.unit.planner.calibration_cases import (
    CASES,
    H100_BARE,
    H100_ROUND1,
    H100_ROUND2,
    LAYOUTS,
    LAYOUTS_AGAIN,
    MISSES,
    S32_CALL,
    S32_RUNS,
    S36,
    S36_RUNS,
    SANDBOX_H100_LINK,
    SERVER_45,
    TOLERANCE,
    Case,
    _error,
    _json,
)

# Saved runs of the 2026-11-26 files the model is not held to, and why (every other entry of
# those files is a case of calibration_cases.CASES: test_every_saved_bench_run_is_held_or_listed).
NOT_HELD = {
    (LAYOUTS, "server_expandable"): "PYTORCH_CUDA_ALLOC_CONF=expandable_segments (the runtime "
    "does not set it) and the call's first run, cold compile caches: 1.986 s/step",
    (LAYOUTS_AGAIN, "server_expandable"): "same, call 2's first run, cold caches: 2.413 s/step",
    (H100_BARE, "bare_dp2"): "bare TRL under torchrun (the comparison with hpc-grpo, not a "
    "layout the plan makes)",
    **{(S36, key): "bare TRL under torchrun, as above" for key in S36_RUNS if key.startswith("bare")},
}

# Issue #30 (markdown only, no raw JSON): 7B on one H200, ZeRO-3 + optimizer offload
# 10.16 s/step against ZeRO off + sleep mode 3.23 s/step, same job. Its shape is not recorded,
# so the model is held to the difference, which offload's per-step cost makes up.
ISSUE_30_OFFLOAD_COST_S = 10.16 - 3.23


MISS_BOUND = 0.40
# Saved runs not held at all: the model's input is unknown.
NOT_HELD_RUNS = {
    "2026-11-26-multinode-reference-h100x2.json": "the two-node ZeRO-3 run of the first 2 x H100 "
    "loan of 2026-11-26 (3.188 s/step): its link between the nodes was not measured; the "
    "second loan's run (4.119 s/step) is held at that loan's 2.152 GB/s",
}


@pytest.mark.parametrize("case", [c for c in CASES if c.name not in MISSES], ids=lambda c: c.name)
def test_predicted_step_time_within_20_percent_of_measured(case: Case) -> None:
    error = _error(case)
    assert abs(error) <= TOLERANCE, f"{case.name}: predicted {case.predicted().seconds:.3f} s, " \
        f"measured {case.measured():.3f} s ({error:+.0%})"


@pytest.mark.parametrize("case", [c for c in CASES if c.name in MISSES], ids=lambda c: c.name)
def test_a_listed_miss_misses_by_less_than_the_bound(case: Case) -> None:
    error = _error(case)
    assert TOLERANCE < abs(error) <= MISS_BOUND, f"{case.name}: {error:+.0%} ({MISSES[case.name]})"


def test_every_listed_miss_is_a_case() -> None:
    assert set(MISSES) <= {case.name for case in CASES}
    for name in NOT_HELD_RUNS:
        assert (RESULTS / name).exists(), name


def test_held_cases_cover_both_h100_loans_and_the_sandbox_link() -> None:
    """The misses are a minority: most rows of each 2 x H100 loan are held to 20 %, and so is
    the two-node row at the link doctor measured."""
    held = [case for case in CASES if case.name not in MISSES]
    assert sum("h100" in c.name and "2026-11-26" in c.name for c in held) >= 4
    assert sum("h100" in c.name and "2026-11-26" not in c.name for c in held) >= 4
    assert any(c.nodes == 2 and c.inter_gbs == SANDBOX_H100_LINK for c in held)
    assert len(MISSES) * 5 < len(CASES)


def _offload_cost() -> float:
    seven = next(case for case in CASES if case.name == "h200 7B ZeRO off + sleep")
    off = replace(seven, layout=Layout(1, 3, offload_optimizer=True, sleep=True))
    return off.predicted().seconds - seven.predicted().seconds


def test_7b_offload_costs_what_issue_30_measured() -> None:
    assert abs(_offload_cost() / ISSUE_30_OFFLOAD_COST_S - 1) <= TOLERANCE


def test_the_calibration_covers_the_required_layouts() -> None:
    names = " ".join(case.name for case in CASES)
    for needed in ("0.5B", "1.5B", "7B", "TP1xDP2", "2 nodes", "server", "ZeRO-3", "offload",
                   "ZeRO off + sleep", "no recomputation", "ZeRO-2"):
        assert needed in names, needed


def test_every_saved_bench_run_is_held_or_listed() -> None:
    """No saved run is dropped silently: each is a case or in NOT_HELD with its reason."""
    held = {"plan", "no_grad_ckpt_plan", "default_plan", "no_grad_ckpt", "server"}
    for name in (LAYOUTS, LAYOUTS_AGAIN, SERVER_45, H100_ROUND1, H100_ROUND2, H100_BARE):
        runs = {key for key, value in _json(name).items()
                if isinstance(value, dict) and "step_s" in value}
        assert runs, name
        for key in runs:
            assert key in held or (name, key) in NOT_HELD, (name, key)
    for name, keys in S32_RUNS.items():  # session 32's repeats: every one is a case above
        runs = {key for key, value in _json(name).items()
                if isinstance(value, dict) and "step_s" in value}
        assert runs == set(keys), name
        names = {case.name for case in CASES}
        assert all(any(f"{S32_CALL[name]}, {key})" in n for n in names) for key in keys), name
    runs = {key for key, value in _json(S36).items() if isinstance(value, dict) and "step_s" in value}
    assert runs == set(S36_RUNS)  # session 36: every run is a case or bare TRL's, listed
    names = {case.name for case in CASES}
    for key in S36_RUNS:
        assert (S36, key) in NOT_HELD or any(f"(session 36, {key})" in n for n in names), key


def test_the_repeated_2026_11_26_runs_agree_with_call_1() -> None:
    """The spread between runs of one layout on one machine (call 2, the 45-step run) is well
    inside the tolerance, so a single run per layout is a fair case."""
    pairs = [(_json(LAYOUTS)["no_grad_ckpt_plan"], _json(LAYOUTS_AGAIN)["no_grad_ckpt_plan"]),
             (_json(LAYOUTS)["server"], _json(LAYOUTS_AGAIN)["server"]),
             (_json(LAYOUTS)["server"], _json(SERVER_45)["server"])]
    for first, again in pairs:
        assert abs(again["step_s"] / first["step_s"] - 1) <= 0.05


def test_recomputation_costs_time_at_1_5b_as_measured() -> None:
    """ZeRO-2 at 1.5B on 2 x H200: with recomputation the slower in both the model and the
    measurement (1.449 against 1.253 s/step); the model's difference is smaller (terms.py)."""
    cases = {case.name: case for case in CASES}
    on = cases["h200 1.5B colocate ZeRO-2 TP1xDP2"]
    off = cases["h200 1.5B colocate ZeRO-2, no recomputation"]
    assert on.measured() > off.measured()
    assert on.predicted().seconds > off.predicted().seconds


@pytest.mark.parametrize(("constant", "factor"), [
    ("TRAIN_FLOP_FRACTION", 0.5), ("DECODE_SEQ_S", 3.0), ("ZERO3_LINK_FRACTION", 5.0),
    ("CPU_ADAM_S_PER_PARAM", 3.0), ("RECOMPUTE_COST", 3.0), ("STEP_S", 3.0),
    ("ZERO3_FETCH_S_PER_LAYER", 3.0), ("TP_COLLECTIVE_S", 3.0),
])
def test_a_perturbed_model_fails_the_check(monkeypatch: pytest.MonkeyPatch, constant: str,
                                           factor: float) -> None:
    monkeypatch.setattr(terms, constant, getattr(terms, constant) * factor)
    errors = [abs(_error(case)) for case in CASES if case.name not in MISSES]
    errors.append(abs(_offload_cost() / ISSUE_30_OFFLOAD_COST_S - 1))
    assert max(errors) > TOLERANCE


def test_calibration_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints the table (pytest -s) that docs/benchmarks.md quotes."""
    with capsys.disabled():
        for case in CASES:
            print(f"{case.name:48} measured {case.measured():6.3f} predicted "
                  f"{case.predicted().seconds:6.3f} {_error(case):+6.1%}"
                  + (" (listed miss)" if case.name in MISSES else ""))


@pytest.mark.parametrize("session", ["session 33", "session 34"])
def test_the_7b_layouts_rank_as_measured(session: str) -> None:
    """Sessions 33 and 34 (two loans) ran the plan's 7B layout beside the two others that fit
    2 x H100: the model must order them as each measurement did (the plan's is the fastest)."""
    runs = [case for case in CASES if "7B" in case.name and f"({session})" in case.name]
    assert len(runs) == 3
    by_measured = sorted(runs, key=lambda case: case.measured())
    by_predicted = sorted(runs, key=lambda case: case.predicted().seconds)
    assert [c.name for c in by_predicted] == [c.name for c in by_measured]
