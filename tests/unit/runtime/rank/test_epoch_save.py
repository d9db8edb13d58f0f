"""``save_strategy: epoch`` through transformers' own training loop with the ranks' callbacks:
a step that ends an epoch and is saved at its step end (the run's last step, or a stop) is
saved once, not rewritten into the folder already marked complete at the epoch end; an epoch
end inside the run still saves, and the disk check covers that save too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from hpc_grpo.runtime.node import watchdog
from hpc_grpo.runtime.rank.callbacks import DiskSpaceCallback, GracefulStopCallback
from hpc_grpo.runtime.rank.checkpoints import folders as checkpoints
from hpc_grpo.runtime.rank.checkpoints.marker import CheckpointMarkerCallback
from hpc_grpo.runtime.rank.observe import heartbeat
from hpc_grpo.runtime.shared.signals import StopFlag

SAMPLES = 8  # batch 2: 4 steps an epoch


class Line(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.w(x).squeeze(-1), y)}


class Saves(TrainerCallback):
    """Every save's step, in order, and how many complete markers each folder got."""

    def __init__(self, stop_at: int | None = None, flag: StopFlag | None = None) -> None:
        self.steps: list[int] = []
        self.stop_at, self.flag = stop_at, flag

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        self.steps.append(state.global_step)
        return control

    def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        if self.flag is not None and state.global_step + 1 == self.stop_at:
            self.flag.reason = "signal SIGUSR2"  # as the handler sets it, during the step
        return control


def _trainer(tmp_path: Path, max_steps: int, flag: StopFlag | None = None,
             stop_at: int | None = None) -> tuple[Trainer, Saves, Path]:
    data = [{"x": torch.tensor([float(i), 1.0]), "y": torch.tensor(float(i % 3))} for i in range(SAMPLES)]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = TrainingArguments(output_dir=str(run_dir / "checkpoints"), per_device_train_batch_size=2,
                             max_steps=max_steps, save_strategy="epoch", logging_strategy="no",
                             report_to=[], use_cpu=True, save_only_model=True, disable_tqdm=True)
    saves = Saves(stop_at, flag)
    cpu = torch.device("cpu")
    callbacks = [GracefulStopCallback(run_dir, flag or StopFlag(), cpu),
                 CheckpointMarkerCallback(run_dir), saves, DiskSpaceCallback(run_dir, 1000, cpu)]
    return Trainer(model=Line(), args=args, train_dataset=data, callbacks=callbacks), saves, run_dir


def _train(tmp_path: Path, max_steps: int, flag: StopFlag | None = None, stop_at: int | None = None,
           free: int | None = None, monkeypatch: pytest.MonkeyPatch | None = None,
           ) -> tuple[Saves, list[str]]:
    if free is not None and monkeypatch is not None:
        monkeypatch.setattr(checkpoints, "free_bytes", lambda output: free)
    trainer, saves, run_dir = _trainer(tmp_path, max_steps, flag, stop_at)
    trainer.train()
    folders = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    return saves, folders


def test_the_last_step_at_an_epoch_end_is_saved_once(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    saves, folders = _train(tmp_path, max_steps=2 * SAMPLES // 2)  # two epochs, ends on one
    assert saves.steps == [4, 8], saves.steps  # epoch 1's end, then the last step once
    assert folders == ["checkpoint-4", "checkpoint-8"]
    assert "epoch end at step 8: checkpoint-8 was saved at the step's end" in capsys.readouterr().out


def test_a_stop_on_an_epoch_end_step_is_saved_once(tmp_path: Path) -> None:
    saves, _ = _train(tmp_path, max_steps=12, flag=StopFlag(), stop_at=4)
    assert saves.steps == [4], saves.steps


def test_a_stop_inside_an_epoch_is_saved_once_at_its_step(tmp_path: Path) -> None:
    saves, folders = _train(tmp_path, max_steps=12, flag=StopFlag(), stop_at=6)
    assert saves.steps == [4, 6], saves.steps  # epoch 1's end, then the stop (no epoch end save)
    assert folders == ["checkpoint-4", "checkpoint-6"]


def test_an_epoch_end_save_that_does_not_fit_is_skipped(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    saves, folders = _train(tmp_path, max_steps=8, free=10, monkeypatch=monkeypatch)
    assert saves.steps == [] and folders == []


def test_the_heartbeat_says_saving_during_an_epoch_end_save(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The stall watchdog allows for a checkpoint only while the phase is "saving"; an epoch-end
    save (no step end asked for it) was timed as training."""
    trainer, _, run_dir = _trainer(tmp_path, max_steps=6)  # epoch 1 ends at 4: an epoch-end save
    monkeypatch.setattr(heartbeat, "BEAT", heartbeat.Heartbeat(run_dir, 0, "a1"))
    heartbeat.watch(trainer)
    phases: list[tuple[int, str]] = []
    save = trainer._save_checkpoint

    def noting(*args: Any, **kwargs: Any) -> Any:
        beat = watchdog.read_beats(str(run_dir), 1)[0]
        phases.append((trainer.state.global_step, beat.phase if beat else "none"))
        return save(*args, **kwargs)

    monkeypatch.setattr(trainer, "_save_checkpoint", noting)
    trainer.train()
    assert phases == [(4, "saving"), (6, "saving")], phases
