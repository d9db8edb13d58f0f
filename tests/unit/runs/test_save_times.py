"""Each save's measured time beside the plan's prediction (issue #59): ``status RUN`` prints one
line of saves.jsonl against run.json's ``predicted_save_s``, ``status --json`` has the figures,
and a run directory of the previous release (no ledger, no prediction) still shows its status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runs import track, views
from hpc_grpo.runs.saves import SaveTimes
from tests.unit.slurmfake import FakeSlurm, make_run


def _saves(run_dir: Path, lines: list[dict[str, Any]], **record: Any) -> Path:
    """Rank 0's saves.jsonl lines, and the plan's prediction in run.json."""
    (run_dir / "saves.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = json.loads((run_dir / "run.json").read_text())
    data.update(record)
    (run_dir / "run.json").write_text(json.dumps(data))
    return run_dir


PREDICTED = {"predicted_save_s": 3.8, "save_write_gbs": 2.0, "save_write_source": "assumed"}


@pytest.fixture
def quiet(fake: FakeSlurm) -> FakeSlurm:
    fake.answer("sacct", "")
    fake.answer("squeue", "")
    return fake


def test_status_of_a_named_run_shows_each_save_against_the_prediction(
        quiet: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _saves(make_run(tmp_path / "runs", "grpo-a-0001", phase="done", step=6),
           [{"step": 2, "seconds": 4.1}, {"step": 4, "seconds": 5.0}, {"step": 6, "seconds": 4.6}],
           **PREDICTED)
    named = track.status(["grpo-a-0001"])[0]
    line = ("saves: 3 saves, 4.1-5.0 s each (median 4.6 s) against 3.8 s predicted (+21%), "
            "at 2 GB/s a node (assumed)")
    assert named.saves == line
    views.status_table([named])
    assert f"grpo-a-0001: {line}\n" in capsys.readouterr().out
    row = named.to_dict()
    assert (row["save_s"], row["save_s_median"], row["save_s_predicted"]) == ((4.1, 5.0, 4.6), 4.6, 3.8)
    assert (row["save_write_gbs"], row["save_write_source"], row["save_held_s"]) == (2.0, "assumed", ())
    json.dumps(row)  # status --json
    every = track.status()[0]  # the whole table: one line a run, the figures in --json still
    assert every.saves == "" and every.save_s_median == 4.6
    views.status_table([every])
    assert "saves:" not in capsys.readouterr().out


def test_saves_that_held_training_less_than_they_took_say_so(quiet: FakeSlurm, tmp_path: Path) -> None:
    _saves(make_run(tmp_path / "runs", "grpo-b-0001", phase="training", step=4),
           [{"step": 2, "seconds": 6.0, "held_s": 0.8}, {"step": 4, "seconds": 7.0, "held_s": 1.0}],
           predicted_save_s=6.5, save_write_gbs=4.0, save_write_source="measured")
    row = track.status(["grpo-b-0001"])[0]
    assert row.save_held_s == (0.8, 1.0)
    assert row.saves == ("saves: 2 saves, 6.0-7.0 s each (median 6.5 s) against 6.5 s predicted "
                         "(+0%), at 4 GB/s a node (measured); training held 0.8-1.0 s each "
                         "(median 0.9 s)")


def test_without_a_prediction_the_saves_say_there_is_none(quiet: FakeSlurm, tmp_path: Path) -> None:
    _saves(make_run(tmp_path / "runs", "grpo-c-0001", phase="done", step=2),
           [{"step": 2, "seconds": 0.0512}])
    row = track.status(["grpo-c-0001"])[0]
    assert (row.save_s, row.save_s_predicted, row.save_write_source) == ((0.0512,), None, "")
    assert row.saves == ("saves: 1 save, 0.051 s, no prediction (an unknown architecture, or "
                         "run.json written before it)")


def test_a_run_directory_of_the_previous_release_shows_its_last_save_or_nothing(
        quiet: FakeSlurm, tmp_path: Path) -> None:
    """No saves.jsonl and no predicted_save_s in run.json: state.json's last save, said to be
    that; a run without a save has no saves line, and neither raises."""
    old = make_run(tmp_path / "runs", "grpo-d-0001", phase="done", step=4)
    state = json.loads((old / "state.json").read_text())
    (old / "state.json").write_text(json.dumps({**state, "checkpoint_seconds": 12.25}))
    row = track.status(["grpo-d-0001"])[0]
    assert row.state != "BROKEN" and row.save_s == (12.25,) and row.save_s_predicted is None
    assert row.saves == ("saves: the last save 12.2 s (state.json; no saves.jsonl: written before "
                         "hpc-grpo kept each save), no prediction (an unknown architecture, or "
                         "run.json written before it)")
    make_run(tmp_path / "runs", "grpo-e-0001", phase="training", step=1)
    fresh = track.status(["grpo-e-0001"])[0]
    assert fresh.state != "BROKEN" and (fresh.save_s, fresh.saves) == ((), "")


def test_the_line_compares_the_median_and_leaves_out_an_unknown_source() -> None:
    times = SaveTimes(measured=(2.0, 30.0, 3.0), predicted=2.0, gbs=10.0)
    assert times.median == 3.0
    assert times.line() == ("saves: 3 saves, 2.0-30.0 s each (median 3.0 s) against 2.0 s "
                            "predicted (+50%), at 10 GB/s a node")
    assert SaveTimes(predicted=2.0).line() == "" and SaveTimes().median is None
