"""status's start-up line (runs/attempts.startup_line) from startup.jsonl, and where it shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.runs import attempts, runfiles, views
from tests.unit.runs.views_helpers import _row

LINE = {"attempt": "slurm-7.1", "process_start": 1.0, "resumed_from_step": 3,
        "parts_s": {"first_step": 3.9, "imports": 0.9, "prepare_and_load": 6.2,
                    "torch_and_group": 3.5, "trainer": 30.2}, "total_s": 44.7}


def test_largest_part_first_with_where_it_resumed() -> None:
    assert attempts.startup_line(LINE) == (
        "start-up (resumed from step 3): first step 44.7 s after the rank started "
        "(trainer and engine 30.2, prepare and load 6.2, first step 3.9, torch and process group 3.5, "
        "imports 0.9)")
    assert "(from scratch)" in attempts.startup_line({**LINE, "resumed_from_step": None})


@pytest.mark.parametrize("bad", [{}, {"parts_s": "x", "total_s": 1.0},
                                 {"parts_s": {}, "total_s": "1"},
                                 {"parts_s": {}, "total_s": True},
                                 {"parts_s": {}, "total_s": 10**400},
                                 {"parts_s": {}, "total_s": float("nan")}])
def test_nothing_for_no_line_or_a_damaged_one(bad: dict[str, object]) -> None:
    assert attempts.startup_line(bad) == ""


def test_damaged_parts_and_step_are_left_out() -> None:
    line = attempts.startup_line({**LINE, "resumed_from_step": True, "parts_s": {
        "trainer": 30.2, "imports": float("inf"), "first_step": 10**400, "x": "y"}})
    assert line == ("start-up (from scratch): first step 44.7 s after the rank started "
                    "(trainer and engine 30.2)")


def test_an_older_attempt_s_line_is_not_the_current_restart_s() -> None:
    """The newest attempt (state.json's) has not reached a step: its cost is not known yet."""
    assert attempts.startup_line(LINE, "slurm-7.2") == ""
    assert attempts.startup_line(LINE, "slurm-7.1").startswith("start-up (resumed from step 3)")


def test_read_from_the_run_directory_last_line_only(tmp_path: Path) -> None:
    (tmp_path / "startup.jsonl").write_text(
        json.dumps({**LINE, "total_s": 99.0}) + "\n" + json.dumps(LINE) + "\n")
    assert runfiles.read_run(tmp_path).startup == LINE


def test_shown_under_the_table_for_a_restarted_run_only(capsys: pytest.CaptureFixture[str]) -> None:
    line = attempts.startup_line(LINE)
    views.status_table([_row(startup=line), _row("fresh-0001", restarts=(), requeues=0,
                                                 startup="start-up (from scratch): never shown")])
    out = capsys.readouterr().out
    assert line in out and "never shown" not in out


def test_the_trainer_part_shows_its_split_largest_first() -> None:
    line = attempts.startup_line({**LINE, "trainer_parts_s": {
        "model_load": 8.25, "engine_start": 19.5, "bad": float("nan")}})
    assert "(trainer and engine 30.2 (vLLM engine start 19.5, model load 8.2), prepare and " \
        "load 6.2," in line
    assert attempts.startup_line({**LINE, "trainer_parts_s": "x"}) == attempts.startup_line(LINE)


def test_the_prepare_part_shows_its_split_and_each_split_stays_in_its_part() -> None:
    line = attempts.startup_line({**LINE, "trainer_parts_s": {"engine_start": 19.5},
                                  "prepare_parts_s": {"accelerate_prepare": 4.0,
                                                      "deepspeed_checkpoint_load": 1.5}})
    assert "trainer and engine 30.2 (vLLM engine start 19.5), prepare and load 6.2 " \
        "(DeepSpeed/accelerate prepare 4.0, DeepSpeed checkpoint load 1.5), first step 3.9," in line
