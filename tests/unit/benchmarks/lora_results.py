"""The saved 7B LoRA resume results (docs/results) and the docs/benchmarks.md sections that quote
them, for the per-session unit tests that hold one to the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.lora_7b_helpers import KEYS
from tests.paths import DOCS

# the UTC day each session's files are named by, and the machine kind
DAYS = {34: "2026-11-26", 35: "2026-11-27", 47: "2026-11-28", 48: "2026-11-29"}
MACHINES = {34: "h100x2", 35: "h100x2", 47: "h200", 48: "h200"}


def _saved(kind: str, session: int, suffix: str) -> Path:
    name = f"{DAYS[session]}-7b-lora-resume-{kind}-{MACHINES[session]}-session{session}{suffix}"
    return DOCS / "results" / name


def load(kind: str, session: int) -> Any:
    """One run's JSON: kind is reference, second, resumed or cold."""
    return json.loads(_saved(kind, session, ".json").read_text())


def cold_rows(session: int) -> list[dict[str, Any]]:
    """The cold-cache run's metrics.jsonl rows of logged steps (saved beside its JSON)."""
    text = _saved("cold-metrics", session, ".jsonl").read_text()
    return [row for row in map(json.loads, text.splitlines()) if "reward_mean" in row]


def cold_rank0_log(session: int) -> str:
    """The cold-cache run's rank-0 log (saved beside its JSON)."""
    return _saved("cold-rank0", session, ".log").read_text()


def steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compared keys of each step's row."""
    return [{k: r.get(k) for k in KEYS} for r in rows]


def docs_section(heading: str) -> str:
    """docs/benchmarks.md from ``heading`` to the next level-2 heading, its whitespace collapsed
    so that a quoted figure matches wherever the markdown wraps it."""
    text = (DOCS / "benchmarks.md").read_text()
    start = text.index(heading)
    return " ".join(text[start:text.index("\n## ", start)].split())


def assert_warm_under_half_of_cold(session: int) -> None:
    """#29's restart goal on a session's cold run: the warm restart (the fastest of the resumed
    run's) to first new step at most half the cold one, and the saved ratio the one they give."""
    cold = load("cold", session)
    times = cold["restart_first_new_step_s"]
    assert times["warm"] == min(load("resumed", session)["warm_restart_first_new_step_s"])
    assert 0 < times["warm"] <= 0.5 * times["cold"]
    assert cold["warm_over_cold"] == round(times["warm"] / times["cold"], 3)


def assert_warm_chain_equal(session: int) -> None:
    """A session's warm chain: stopped by SIGUSR2 after steps 2 and 4, resumed twice, every step
    equal to the uninterrupted second run's, which the (cold-compiled) reference equals too, and
    the final adapter's 112 tensors equal to both runs' bit for bit."""
    resumed, second, reference = (load("resumed", session), load("second", session),
                                  load("reference", session))
    assert [(a["phase"], a["step"]) for a in resumed["attempts"]] == [
        ("interrupted", 2), ("interrupted", 4), ("done", 6)]
    assert {a["stop_cause"] for a in resumed["attempts"][:2]} == {"user signal"}
    assert len(second["steps"]) == 6 and resumed["steps"] == second["steps"]
    ref = [{k: r.get(k) for k in ("step", "reward_mean", "reward_std", "loss")}
           for r in reference["steps"]]
    assert ref == second["steps"]
    equal = {"tensors": 112, "only_one": [], "unequal": 0, "max_abs_diff": 0.0}
    assert resumed["adapter_against_second"] == equal == resumed["adapter_against_reference"]
