"""Weights reach vLLM (issue #15): the judgement of metrics.jsonl's vLLM/trainer log-probability
difference, and `status` flagging a run whose recent steps exceed the bound."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.rundir.contract import LOGP_DIFF_MAX, LOGP_DIFF_MEAN
from hpc_grpo.runs import drift, track
from tests.unit.slurmfake import FakeSlurm, identity, make_run, sacct_line

T0 = "2026-01-01T10:00:00"
HEALTHY = 0.012  # the size TRL issue 5312 reports for an engine with the trained weights
STALE = 0.41


def line(step: int, diff: float | None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"step": step, "max_steps": 10, "reward_mean": -1.0, "loss": 0.1,
                           "tokens_per_s": 100.0, "time": 1.0e9 + step, **extra}
    if diff is not None:
        row[LOGP_DIFF_MEAN] = diff
        row[LOGP_DIFF_MAX] = diff * 20
    return row


def test_the_bound_separates_healthy_from_stale_engines() -> None:
    assert not drift.exceeds(HEALTHY) and drift.exceeds(0.2)  # TRL issue 5312: 0.015 -> 0.2


def test_a_healthy_run_is_not_flagged() -> None:
    assert drift.judge([line(s, HEALTHY) for s in range(1, 11)]) is None


def test_a_recent_step_above_the_bound_is_flagged_with_the_worst_one() -> None:
    rows = [line(s, HEALTHY) for s in range(1, 8)] + [line(8, 0.2), line(9, STALE), line(10, 0.3)]
    found = drift.judge(rows)
    assert found == drift.Drift(step=9, value=STALE, bound=drift.BOUND_NATS)
    assert "step 9" in found.line() and "0.410" in found.line() and "stale" in found.line()


def test_only_the_last_window_of_steps_counts() -> None:
    rows = [line(1, STALE)] + [line(s, HEALTHY) for s in range(2, 2 + drift.WINDOW)]
    assert drift.judge(rows) is None  # drift long ago, healthy since
    assert drift.judge(rows, window=drift.WINDOW + 1) is not None


def test_lines_without_a_value_are_neither_drift_nor_counted_in_the_window() -> None:
    # TRL logs None when no token could be scored; CPU runs and runs with the correction off
    # have no value at all; a hand-edited file may hold anything
    odd = [line(2, None), line(3, None, **{LOGP_DIFF_MEAN: None}),
           line(4, None, **{LOGP_DIFF_MEAN: "0.5"}), line(5, None, **{LOGP_DIFF_MEAN: True}),
           line(6, None, **{LOGP_DIFF_MEAN: math.nan})]
    assert drift.judge(odd) is None
    assert drift.judge([line(1, STALE), *odd, *odd]) is not None  # still among the last 5 values
    assert [drift.logp_diff(r) for r in odd] == [None] * 5
    assert drift.logp_diff(line(7, None, **{LOGP_DIFF_MEAN: 10**400})) is None  # no float holds it


def _run(tmp_path: Path, run_id: str, job: str, diffs: list[float | None]) -> str:
    """A run of job ``job`` whose metrics carry ``diffs``; returns sacct's line for its job."""
    ident = identity(tmp_path / "runs" / run_id, job)
    run_dir = make_run(tmp_path / "runs", run_id, job=ident)
    (run_dir / "state.json").write_text(json.dumps({"phase": "training", "step": len(diffs),
                                                    "max_steps": 10}))
    # GPU-sized lines (rewards, memory, phases) so that the window spans several kB
    pad = {"phases_s": {f"block_{i}": 0.1 for i in range(40)}}
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(line(s, d, **pad)) + "\n" for s, d in enumerate(diffs, 1)))
    return sacct_line(job, "RUNNING", T0, submit_line=ident["script"])


def test_status_flags_a_drifting_run_and_not_a_healthy_one(
    fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = _run(tmp_path, "stale-0001", "7", [HEALTHY, 0.2, STALE, 0.35, 0.3, 0.3])
    fine = _run(tmp_path, "fine-0001", "8", [HEALTHY] * 9)
    fake.answer("sacct", stale + fine)
    rows = {r.run_id: r for r in track.status()}
    assert rows["stale-0001"].drift.startswith("vLLM drift: at step 3 ")
    assert rows["stale-0001"].logp_diff == 0.3
    assert (rows["fine-0001"].drift, rows["fine-0001"].logp_diff) == ("", HEALTHY)

    monkeypatch.setenv("COLUMNS", "100")
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 0, result.stderr
    notes = [ln for ln in result.stdout.splitlines() if "drift" in ln]
    assert len(notes) == 1 and notes[0].startswith("stale-0001: vLLM drift: at step 3"), notes
    data = {d["run_id"]: d for d in json.loads(CliRunner().invoke(main, ["status", "--json"]).stdout)}
    assert data["stale-0001"]["drift"] and data["stale-0001"]["logp_diff"] == 0.3
    assert data["fine-0001"]["drift"] == ""
