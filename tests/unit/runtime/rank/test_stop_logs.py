"""A stop and the last step log: with ``logging_steps`` > 1 the loss transformers sums since the
previous log is kept in memory only and was lost at a stop (the end-of-training summary has no
``loss``); tests/slow/test_resume_logging_window.py shows it on a run."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
from transformers import TrainerControl, TrainerState  # noqa: E402

from hpc_grpo import rundir  # noqa: E402
from hpc_grpo.runtime.rank.callbacks import GracefulStopCallback  # noqa: E402
from hpc_grpo.runtime.rank.stop import StopFlag  # noqa: E402


def step_end(run_dir: Path, step: int, max_steps: int = 10) -> TrainerControl:
    callback = GracefulStopCallback(run_dir, StopFlag(), "cpu")  # type: ignore[arg-type]
    state = TrainerState(global_step=step, max_steps=max_steps)
    return callback.on_step_end(None, state, TrainerControl())  # type: ignore[arg-type]


def test_an_ordinary_step_leaves_logging_to_logging_steps(tmp_path: Path) -> None:
    control = step_end(tmp_path, 4)
    assert not control.should_log and not control.should_save and not control.should_training_stop


def test_a_stop_logs_before_it_saves(tmp_path: Path) -> None:
    rundir.request_stop(tmp_path, "asked by a person")
    control = step_end(tmp_path, 4)
    assert control.should_training_stop and control.should_save and control.should_log


def test_the_last_step_logs(tmp_path: Path) -> None:
    control = step_end(tmp_path, 10)
    assert control.should_log and control.should_save
