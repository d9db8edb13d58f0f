"""Measured beside predicted s/step (issue #58): ``status RUN`` and ``status --json`` show them,
and the registry hands the planner each shape's newest measurement on a site, which gives the
plan both its step time and its stop lead (the lead's run is the one of the plan's shape, not
of the job's name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.planner.job import JobPlan, build_plan
from hpc_grpo.planner.timing import Timings, lead_timings
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.rundir.steps import MeasuredStep
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
    old = _steps(make_run(root, "old-0001", phase="done", step=4), [3.0, 2.0, 2.0, 2.0])
    _steps(make_run(root, "new-0001", phase="done", step=4), [3.0, 1.0, 1.0, 1.0])
    _steps(make_run(root, "started-0001", phase="training", step=2), [3.0, 0.5])  # 1 steady
    _steps(make_run(root, "other-0001", phase="done", step=4), [3.0, 4.0, 4.0, 4.0],
           nodes=2, world_size=2)
    _steps(make_run(root, "elsewhere-0001", phase="done", step=4, site="other"),
           [3.0, 9.0, 9.0, 9.0])
    (old / "state.json").write_text(json.dumps({"checkpoint_seconds": 30.0}))
    found = registry.site_measurements("sandbox")
    assert [(m.run_id, m.steady.seconds, m.predicted, m.checkpoint_s) for m in found] == [
        ("other-0001", 4.0, 0.91, None), ("new-0001", 1.0, 0.91, None)]
    assert found[0].shape != found[1].shape
    # the newest run of the shape gives all its figures: new-0001 never saved, so no lead is
    # calibrated by it, and none by the older run's save either (another run's steps)
    assert lead_timings(found[1]) is None


def test_the_lead_takes_the_slowest_steady_step_not_the_last(tmp_path: Path) -> None:
    """The stop lead and the collective timeout are planned from a run's slowest recent step:
    the last line may be a step that trained on an earlier generation (fast), and the median
    is the more common kind's. The attempt's first step (graph capture, compilation) is not
    among them, as it is not among the steady steps."""
    run_dir = _steps(make_run(tmp_path / "runs", "grpo-tiny-0001", phase="done", step=5),
                     [20.0, 9.0, 1.0, 9.0, 1.0, 1.0])
    (run_dir / "state.json").write_text(json.dumps({"checkpoint_seconds": 4.0}))
    [found] = registry.site_measurements("sandbox")
    assert (found.steady.seconds, found.steady.slowest) == (1.0, 9.0)
    assert lead_timings(found) == Timings(4.0, 9.0, "grpo-tiny-0001")


def test_a_damaged_metrics_line_is_skipped_not_the_run(tmp_path: Path) -> None:
    """A line cut short, one that is no object, or one with a step time of the wrong type
    (a hand edit, a disk that filled) drops that line only: the run still measures its shape."""
    run_dir = _steps(make_run(tmp_path / "runs", "grpo-tiny-0001", phase="done", step=5),
                     [5.0, 2.0, 3.0])
    good = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text(
        good + '{"step": 4, "step_ti\n[4, 5]\n{"step": 5, "step_time": "slow"}\n'
        '{"step": 6, "step_time": 2.5}\n')
    (run_dir / "state.json").write_text(json.dumps({"checkpoint_seconds": 7.5}))
    [found] = registry.site_measurements("sandbox")
    assert (found.steady.describe(), found.steady.seconds, found.steady.slowest) == (
        "median of 3 steps, 2-6", 2.5, 3.0)
    assert lead_timings(found) == Timings(7.5, 3.0, "grpo-tiny-0001")


def _tiny(name: str, measured: tuple[MeasuredStep, ...] = (), completion: int = 16) -> JobPlan:
    site = find_site("local")
    spec = build_spec({"model_name_or_path": "builtin:tiny", "name": name,
                       "max_completion_length": completion}, {}, {}, site)
    return build_plan(site, spec, ModelRef("builtin:tiny", local=True, arch=None),
                      measured=measured)


def _ran(plan: JobPlan, root: Path, run_id: str, checkpoint_s: float) -> None:
    """A finished run of ``plan`` on the site: its run.json as submit writes it, its steps and
    its save's seconds as the ranks record them."""
    run_dir = root / run_id
    (run_dir / "submitit").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(plan.run_record(run_id, str(run_dir)).to_dict()))
    _steps(run_dir, [9.0, 2.0, 6.0, 2.0], predicted=None)
    (run_dir / "state.json").write_text(json.dumps({"phase": "done", "step": 4,
                                                    "checkpoint_seconds": checkpoint_s}))
    registry.register(run_id, run_dir)


def test_the_lead_is_calibrated_by_a_run_of_the_plans_shape_whatever_its_name(
        tmp_path: Path) -> None:
    """A renamed job of the same shape has the same step and save: its run sizes the lead. A
    job that kept the name at another shape (longer completions) does not: its figures are of
    other steps."""
    site_lead = find_site("local").signal_lead_s
    _ran(_tiny("before-rename"), tmp_path / "runs", "before-rename-0001", checkpoint_s=200.0)
    _ran(_tiny("job", completion=64), tmp_path / "runs", "job-0001", checkpoint_s=900.0)
    measured = registry.site_measurements("local")
    assert [m.run_id for m in measured] == ["job-0001", "before-rename-0001"]

    plan = _tiny("job", measured)  # the shape of before-rename-0001, the name of job-0001
    assert plan.signal_lead_s == 6 + 300 + 30 > site_lead  # slowest steady step + 1.5 x save
    assert plan.signal_lead_reason.endswith("measured by before-rename-0001")
    assert plan.collective_timeout_reason.endswith("measured by before-rename-0001")
    assert plan.step_time is not None and plan.step_time.measured_by == "before-rename-0001"
    longer = _tiny("job", measured, completion=64)
    assert longer.signal_lead_reason.endswith("measured by job-0001")
    alone = _tiny("job", measured, completion=32)  # a shape no run measured: the profile's
    assert (alone.signal_lead_s, alone.step_time) == (site_lead, None)
