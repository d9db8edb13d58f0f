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
from hpc_grpo.runtime.shared.signals import StopFlag  # noqa: E402


def step_end(run_dir: Path, step: int, max_steps: int = 10, args: object = None) -> TrainerControl:
    callback = GracefulStopCallback(run_dir, StopFlag(), "cpu")  # type: ignore[arg-type]
    state = TrainerState(global_step=step, max_steps=max_steps)
    return callback.on_step_end(args, state, TrainerControl())  # type: ignore[arg-type]


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


def test_no_checkpoints_asked_skips_the_final_save_but_not_a_stop(tmp_path: Path) -> None:
    """save_strategy "no" (TrainingArguments turns it into an enum): the last step logs and
    saves nothing; a stop still saves, or a requeue would start over."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "out"), save_strategy="no", use_cpu=True,
                             report_to="none")
    last = step_end(tmp_path, 10, args=args)
    assert last.should_log and not last.should_save
    steps = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    assert step_end(tmp_path, 10, args=steps).should_save
    rundir.request_stop(tmp_path, "asked by a person")
    stopped = step_end(tmp_path, 4, args=args)
    assert stopped.should_save and stopped.should_training_stop


def test_a_stop_before_the_first_step_is_seen_before_training(tmp_path: Path) -> None:
    """Issue #58: a cancel while the ranks started was honoured only at the first step end, so
    the run trained a step and saved checkpoint-1. The ranks now agree before training."""
    callback = GracefulStopCallback(tmp_path, StopFlag(), "cpu")  # type: ignore[arg-type]
    assert not callback.before_training(0) and callback.stopped_at is None
    rundir.request_stop(tmp_path, "TERM to node task", signal="TERM", attempt="a-1")
    assert callback.before_training(3)
    assert callback.stopped_at == 3 and "signal TERM" in (callback.reason or "")
