"""With ``logging_steps`` > 1 a stop between two logs loses no metrics: the stop writes a line
for the steps since the previous log, the resumed run logs the rest of the window, and the
lines of the stopped run average to the uninterrupted run's, step for step. Before, the line at
a stop (and at the last step) came from transformers' end-of-training summary, into which TRL
folds its reward averages but which has no ``loss``: the loss of those steps was lost.

2 ranks, logging_steps 3, 7 steps, a stop at step 4 (not a log step; the last step is not one
either). About 35 s on 2 cores: three launches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.slow.resume_runs import run_with_stops
from tests.slow.runtime_slow_helpers import metrics, tiny_model, write_run

pytestmark = pytest.mark.slow
STEPS = 7
EVERY = 3
STOPS = (4,)
REWARD = "tests.slow.resume_reward:prompt_length_recording"
__all__ = ["tiny_model"]  # the module-scoped fixture, imported for its use here


@pytest.fixture(scope="module")
def runs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(uninterrupted run, run stopped at STOPS and resumed after each stop)."""
    root = tmp_path_factory.mktemp("logwindow")
    out = []
    for name, stops in (("reference", ()), ("stopped", STOPS)):
        run_dir = root / name
        run = write_run(run_dir, tiny_model, steps=STEPS, reward_funcs=[REWARD])
        run["grpo_config"]["logging_steps"] = EVERY
        (run_dir / "run.json").write_text(json.dumps(run, indent=2))
        run_with_stops(run_dir, stops, STEPS)
        out.append(run_dir)
    return out[0], out[1]


def windows(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(first step, last step) each line covers."""
    out, previous = [], 0
    for row in rows:
        out.append((previous + 1, row["step"]))
        previous = row["step"]
    return out


def test_every_step_is_in_exactly_one_line(runs: tuple[Path, Path]) -> None:
    reference, stopped = runs
    assert [row["step"] for row in metrics(reference)] == [3, 6, 7]
    assert [row["step"] for row in metrics(stopped)] == [3, 4, 6, 7]


@pytest.mark.parametrize("key", ["loss", "reward_mean"])
def test_the_lines_average_to_the_uninterrupted_runs(runs: tuple[Path, Path], key: str) -> None:
    """Each reference line (mean over its steps) equals the step-weighted mean of the stopped
    run's lines inside the same steps: no step's value was dropped or counted twice."""
    reference, stopped = runs
    ref_rows, got_rows = metrics(reference), metrics(stopped)
    assert [row["step"] for row in got_rows if row[key] is None] == []
    assert len({row[key] for row in ref_rows}) > 1  # the values move: equal sums say something
    got = list(zip(windows(got_rows), got_rows, strict=True))
    for (first, last), row in zip(windows(ref_rows), ref_rows, strict=True):
        inside = [(b - a + 1, r[key]) for (a, b), r in got if first <= a and b <= last]
        assert sum(n for n, _ in inside) == last - first + 1, (first, last, inside)
        mean = sum(n * v for n, v in inside) / (last - first + 1)
        assert math.isclose(mean, row[key], rel_tol=1e-5, abs_tol=1e-7), (first, last, key)
