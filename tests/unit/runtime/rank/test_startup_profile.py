"""The start-up profile (runtime/rank/observe/startup_profile.py): only rank 0 and only when asked, and
what runs between its start and the Trainer's on_train_begin is named in the rank's logs."""

from __future__ import annotations

import pstats
import time
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.rank.observe import startup_profile


class FakeTrainer:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)


def a_slow_part_of_start_up() -> None:
    deadline = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:
        pass


def after_train_begin() -> None:
    a_slow_part_of_start_up()


def test_off_unless_asked_and_only_on_rank_0(tmp_path: Path) -> None:
    assert startup_profile.start(tmp_path, 0, {}) is None
    assert startup_profile.start(tmp_path, 0, {startup_profile.ENV: "0"}) is None
    assert startup_profile.start(tmp_path, 1, {startup_profile.ENV: "1"}) is None
    trainer = FakeTrainer()
    startup_profile.write_at_train_begin(trainer, None, tmp_path)
    assert trainer.callbacks == []


def test_what_ran_before_train_begin_is_named_and_what_ran_after_is_not(tmp_path: Path) -> None:
    from transformers import TrainerCallback  # noqa: F401  # as on a rank, before install: alone, this
    # test's profile was otherwise transformers' import, and its top 60 held nothing else
    profiler = startup_profile.start(tmp_path, 0, {startup_profile.ENV: "1"})
    assert profiler is not None
    a_slow_part_of_start_up()
    trainer = FakeTrainer()
    startup_profile.write_at_train_begin(trainer, profiler, tmp_path)
    (callback,) = trainer.callbacks
    control = object()
    assert callback.on_train_begin(None, None, control) is control
    after_train_begin()
    callback.on_train_begin(None, None, control)  # a second train begin writes nothing again
    text = (tmp_path / "logs" / f"{startup_profile.NAME}.txt").read_text()
    assert "a_slow_part_of_start_up" in text and "after_train_begin" not in text
    stats = pstats.Stats(str(tmp_path / "logs" / f"{startup_profile.NAME}.pstats"))
    names = {name for _, _, name in stats.stats}  # type: ignore[attr-defined]
    assert "a_slow_part_of_start_up" in names and "after_train_begin" not in names


def a_start_up_that_fails() -> None:
    a_slow_part_of_start_up()


def test_a_start_up_that_raised_still_leaves_its_profile(tmp_path: Path,
                                                         capsys: Any) -> None:
    startup_profile.write_after_failure(None, tmp_path)  # not asked: nothing
    assert not (tmp_path / "logs").exists()
    profiler = startup_profile.start(tmp_path, 0, {startup_profile.ENV: "1"})
    a_start_up_that_fails()
    startup_profile.write_after_failure(profiler, tmp_path)
    text = (tmp_path / "logs" / f"{startup_profile.NAME}.txt").read_text()
    assert "a_start_up_that_fails" in text
    assert "start-up profile (up to the failure)" in capsys.readouterr().out
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "logs").write_text("a file where the logs folder would go")
    profiler = startup_profile.start(blocked, 0, {startup_profile.ENV: "1"})
    startup_profile.write_after_failure(profiler, blocked)  # reported, not raised
    assert "start-up profile not written" in capsys.readouterr().out
