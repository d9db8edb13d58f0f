"""What docs/benchmarks.md and tests/gpu/test_lora_7b.py say about session 34's 7B LoRA runs,
held to the raw JSON (2 x H100): the warm runs are bit-equal, the cold-compiled reference is
not, and a cold-cache resume moves the loss of its first step by less than LOSS_RTOL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.test_lora_7b import KEYS, LOSS_RTOL

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _load(kind: str) -> Any:
    return json.loads((RESULTS / f"2026-11-26-7b-lora-resume-{kind}-h100x2-session34.json").read_text())


def _steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in KEYS} for r in rows]


def test_the_warm_runs_are_bit_equal_until_the_cold_resume() -> None:
    second, resumed = _load("second")["steps"], _load("resumed")["steps"]
    attempts = _load("resumed")["attempts"]
    assert [(a["cache"], a["step"]) for a in attempts] == [("warm", 2), ("cold", 4), ("warm", 6)]
    assert resumed[:2] == second[:2]  # the first attempt, warm caches, GPU 1 against GPU 0
    ours, theirs = resumed[2], second[2]  # step 3, the first after the cold-cache resume
    assert ours["reward_mean"] == theirs["reward_mean"] and ours["loss"] != theirs["loss"]
    assert abs(ours["loss"] - theirs["loss"]) <= LOSS_RTOL * abs(theirs["loss"]) + 1e-7
    assert resumed[3]["reward_mean"] != second[3]["reward_mean"]  # apart one step later
    assert _load("resumed")["adapter_against_second"]["unequal"] == 112


def test_the_cold_compiled_reference_differs_from_the_warm_runs_at_step_1() -> None:
    reference = _steps(_load("reference")["steps"])
    second = _load("second")["steps"]
    assert reference[0]["reward_mean"] == second[0]["reward_mean"]
    assert abs(reference[0]["loss"] - second[0]["loss"]) > 0.04


def test_restart_warm_under_half_of_cold() -> None:
    times = _load("resumed")["restart_first_new_step_s"]
    assert 0 < times["warm"] <= 0.5 * times["cold"]
