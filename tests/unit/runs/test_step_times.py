"""Measured beside predicted s/step (issue #58): ``status RUN`` and ``status --json`` show them,
and the registry hands the planner each shape's newest measurement on a site."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runs import registry, track, views
from tests.unit.slurmfake import FakeSlurm, make_run


def _steps(run_dir: Path, times: list[float], predicted: float | None = 0.91,
           **record: Any) -> Path:
    """The ranks' metrics lines with step times, and the plan's prediction in run.json."""
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward_mean": 0.1, "step_time": t}) + "\n"
        for s, t in enumerate(times, 1)))
    data = json.loads((run_dir / "run.json").read_text())
    data.update(predicted_step_s=predicted, **record)
    (run_dir / "run.json").write_text(json.dumps(data))
    return run_dir


def test_status_of_a_named_run_shows_measured_beside_predicted(
        fake: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake.answer("sacct", "")
    fake.answer("squeue", "")
    _steps(make_run(tmp_path / "runs", "grpo-a-0001", phase="done", step=5),
           [4.0, 0.62, 0.64, 0.63, 0.66])
    named = track.status(["grpo-a-0001"])[0]
    assert (named.step_s, named.step_s_predicted) == (0.635, 0.91)
    line = "step time: 0.64 s measured (median of 4 steps, 2-5) against 0.91 predicted (-30%)"
    views.status_table([named])
    assert named.step_time == line and f"grpo-a-0001: {line}\n" in capsys.readouterr().out
    assert named.to_dict()["step_s"] == 0.635 and named.to_dict()["step_s_predicted"] == 0.91
    every = track.status()[0]  # the whole table: one line a run, the figures in --json still
    assert every.step_time == "" and every.step_s == 0.635
    views.status_table([every])
    assert "step time" not in capsys.readouterr().out


def test_a_run_without_steady_steps_or_prediction_shows_what_it_has(fake: FakeSlurm,
                                                                    tmp_path: Path) -> None:
    fake.answer("sacct", "")
    fake.answer("squeue", "")
    _steps(make_run(tmp_path / "runs", "grpo-b-0001", phase="training", step=2), [4.0, 1.0],
           predicted=None)
    row = track.status(["grpo-b-0001"])[0]
    assert (row.step_s, row.step_s_predicted, row.step_time) == (None, None, "")


def test_the_registry_gives_each_shapes_newest_measurement_on_the_site(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _steps(make_run(root, "old-0001", phase="done", step=4), [3.0, 2.0, 2.0, 2.0])
    _steps(make_run(root, "new-0001", phase="done", step=4), [3.0, 1.0, 1.0, 1.0])
    _steps(make_run(root, "started-0001", phase="training", step=2), [3.0, 0.5])  # 1 steady
    _steps(make_run(root, "other-0001", phase="done", step=4), [3.0, 4.0, 4.0, 4.0],
           nodes=2, world_size=2)
    _steps(make_run(root, "elsewhere-0001", phase="done", step=4, site="other"),
           [3.0, 9.0, 9.0, 9.0])
    found = registry.measured_steps("sandbox")
    assert [(m.run_id, m.steady.seconds, m.predicted) for m in found] == [
        ("other-0001", 4.0, 0.91), ("new-0001", 1.0, 0.91)]
    assert found[0].shape != found[1].shape
