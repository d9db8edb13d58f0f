"""What docs/benchmarks.md and tests/gpu/test_lora_7b.py say about session 34's 7B LoRA runs,
held to the raw JSON (2 x H100): the warm runs are bit-equal, the cold-compiled reference is
not, and a cold-cache resume moved the loss of its first step by less than 1e-4; and the
figures docs/benchmarks.md quotes are the JSON's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.test_lora_7b import KEYS

DOCS = Path(__file__).resolve().parents[3] / "docs"
RESULTS = DOCS / "results"


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
    assert abs(ours["loss"] - theirs["loss"]) <= 1e-4 * abs(theirs["loss"])  # 8e-5 relative
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


def _lora_section() -> str:
    """The session-34 LoRA section of docs/benchmarks.md, up to the next heading."""
    text = (DOCS / "benchmarks.md").read_text()
    start = text.index("### 7B LoRA on one GPU: the same loan's control (#29)")
    return text[start:text.index("\n## ", start)]


def test_the_docs_quote_the_json() -> None:
    section = _lora_section()
    times = _load("resumed")["restart_first_new_step_s"]
    ratio = round(times["warm"] / times["cold"], 3)
    reference, second = _load("reference")["steps"][0], _load("second")["steps"][0]
    quoted = [f"warm **{times['warm']:.1f} s**", f"cold **{times['cold']:.1f} s: warm/cold {ratio}",
              f"loss {reference['loss']:.4f} against {second['loss']:.4f}",
              f"wall time ({_load('second')['attempt']['wall_s']:.1f} s on the node"]
    missing = [q for q in quoted if q not in " ".join(section.split())]
    assert not missing, missing
