"""A checkpoint's time split by part (runtime/rank/checkpoints/save_parts.py), on transformers' own
``Trainer._save_checkpoint`` with a stood-in DeepSpeed engine whose save takes a known time,
and through the marker callback that records it."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir import ledgers
from hpc_grpo.runtime.rank.checkpoints import deepspeed_save, folders, save_parts
from tests.unit.runtime.rank.deepspeed_save_helpers import OFFLOAD3, _run
from tests.unit.runtime.rank.deepspeed_save_helpers import trainer as trainer  # noqa: F401 (fixture)

ENGINE_SAVE_S = 0.5


def _slow_engine(trainer: Any) -> None:
    engine = trainer.model_wrapped
    save = engine.save_checkpoint

    def slow(*args: Any, **kwargs: Any) -> None:
        time.sleep(ENGINE_SAVE_S)
        save(*args, **kwargs)

    engine.save_checkpoint = slow


def test_transformers_save_checkpoint_calls_the_parts_it_is_split_into() -> None:
    """The premise: each timed call is a Trainer method that ``_save_checkpoint`` makes. A
    transformers that renames one would move its time into rest_of_save unseen."""
    from transformers import Trainer

    source = inspect.getsource(Trainer._save_checkpoint)
    for name, _ in save_parts._INNER:
        assert callable(getattr(Trainer, name)), name
        assert f"self.{name}(" in source, name


def test_the_optimizer_save_is_timed_apart_from_the_rest(trainer: Any) -> None:  # noqa: F811
    deepspeed_save.save_files_once(trainer, _run(OFFLOAD3))
    _slow_engine(trainer)
    clock = save_parts.SaveClock()
    save_parts.time_saves(trainer, clock)
    clock.step_ended()
    trainer._save_checkpoint(trainer.model, trial=None)
    parts = clock.rounded()
    assert list(parts) == ["before", "model_files", "optimizer", "rng", "rest_of_save"], parts
    assert parts["optimizer"] >= ENGINE_SAVE_S
    assert max(parts, key=parts.__getitem__) == "optimizer", parts
    assert trainer.model_wrapped.saves == [str(Path(trainer.args.output_dir) / "checkpoint-1")]


def test_without_deepspeed_save_the_model_files_part_holds_the_first_deepspeed_write(
        trainer: Any) -> None:  # noqa: F811
    """transformers alone writes DeepSpeed's files from save_model too (deepspeed_save.py): the
    split shows it as model files' time equal to the optimizer's."""
    _slow_engine(trainer)
    clock = save_parts.SaveClock()
    save_parts.time_saves(trainer, clock)
    clock.step_ended()
    trainer._save_checkpoint(trainer.model, trial=None)
    assert clock.parts["model_files"] >= ENGINE_SAVE_S
    assert clock.parts["optimizer"] >= ENGINE_SAVE_S


def test_a_save_that_raises_still_counts_its_time(trainer: Any) -> None:  # noqa: F811
    def broken(output_dir: str) -> None:
        time.sleep(0.2)
        raise OSError("No space left on device")

    trainer._save_optimizer_and_scheduler = broken
    clock = save_parts.SaveClock()
    save_parts.time_saves(trainer, clock)
    clock.step_ended()
    with pytest.raises(OSError):
        trainer._save_checkpoint(trainer.model, trial=None)
    assert clock.parts["optimizer"] >= 0.2
    assert "rest_of_save" in clock.parts


def test_each_step_end_starts_a_new_split() -> None:
    clock = save_parts.SaveClock()
    clock.add("optimizer", 3.0)
    clock.step_ended()
    assert clock.rounded() == {}


def test_the_rank_log_line_names_every_part_and_the_total() -> None:
    line = save_parts.line("checkpoint-3", {"before": 0.01, "optimizer": 7.5,
                                            "wait_for_ranks": 1.25})
    assert line == ("checkpoint-3 saved in 8.76 s on this rank: before 0.01, optimizer 7.50, "
                    "waiting for ranks 1.25")


def test_the_marker_callback_records_rank_0_s_split(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from hpc_grpo.runtime.rank.checkpoints.marker import CheckpointMarkerCallback

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = tmp_path / "checkpoints"
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')  # as saved
    marker = CheckpointMarkerCallback(run_dir)
    args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.global_step = 4
    marker.on_step_end(args, state, control)
    marker.clock.add("optimizer", 2.0)  # as save_parts' wrapper adds it
    marker.on_save(args, state, control)
    recorded = rundir.load_state(run_dir).checkpoint_parts_s
    assert recorded is not None
    assert set(recorded) == {"optimizer", "wait_for_ranks", "marker_and_retention"}
    assert recorded["optimizer"] == 2.0
    assert "[checkpoint] checkpoint-4 saved in" in capsys.readouterr().out
    assert folders.is_complete(out / "checkpoint-4")
    (saved,) = ledgers.saves(run_dir)  # each save kept beside state.json's last (#59)
    assert saved.step == 4 and saved.seconds >= (rundir.load_state(run_dir).checkpoint_seconds or 0)
