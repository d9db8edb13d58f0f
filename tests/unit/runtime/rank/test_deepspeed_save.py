"""Full-parameter DeepSpeed checkpoints of DeepSpeed's files alone (rank/checkpoints/deepspeed_save.py):
transformers' own ``Trainer._save_checkpoint``, run on a real Trainer whose DeepSpeed engine is
stood in for (it counts ``save_checkpoint`` calls), writes DeepSpeed's checkpoint twice under
ZeRO-3 without the gathered model file, and a model.safetensors beside it under ZeRO-2, without
the wrapper; once and without a model file with it, keeping the checkpoint's other files; where
the wrapper applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime.rank.checkpoints import deepspeed_save
from tests.unit.runtime.rank.deepspeed_save_helpers import OFFLOAD3, _run
from tests.unit.runtime.rank.deepspeed_save_helpers import trainer as trainer  # noqa: F401, F811 (a fixture)


@pytest.mark.parametrize(("deepspeed", "peft", "expected"), [
    (OFFLOAD3, None, True),  # full parameters at ZeRO-3: no gathered model file
    ({"zero_stage": 3}, None, True),  # without offload too (the stop's save skips the gather)
    ({"zero_stage": 2, "offload_optimizer": True}, None, True),  # the module states hold them
    ({"zero_stage": 1}, None, True),
    ({"zero_stage": 2}, {"r": 8}, False),  # the adapter file is what a LoRA run resumes from
    (OFFLOAD3, {"r": 8}, False),  # peft saves the adapter itself
    ({"zero_stage": 3}, {"r": 8}, False),  # transformers gathers the adapter itself
    (None, None, False),
])
def test_where_it_applies(deepspeed: dict[str, Any] | None, peft: dict[str, Any] | None,
                          expected: bool) -> None:
    assert deepspeed_save.leaves_out_model_file(_run(deepspeed, peft)) is expected


def _checkpoint(trainer: Any) -> tuple[list[str], list[str]]:
    trainer._save_checkpoint(trainer.model, trial=None)
    folder = Path(trainer.args.output_dir) / "checkpoint-1"
    return trainer.model_wrapped.saves, sorted(p.name for p in folder.iterdir())


def test_transformers_alone_writes_deepspeed_s_files_twice(trainer: Any) -> None:
    saves, files = _checkpoint(trainer)
    assert len(saves) == 2 and len(set(saves)) == 1, saves  # the premise of the module


def test_with_the_wrapper_they_are_written_once(trainer: Any) -> None:
    line = deepspeed_save.save_files_once(trainer, _run(OFFLOAD3))
    assert line and "once" in line
    saves, files = _checkpoint(trainer)
    assert saves == [str(Path(trainer.args.output_dir) / "checkpoint-1")]
    # what the fallback writes besides DeepSpeed's files, and no placeholder model file
    assert {"config.json", "trainer_state.json", "global_step1"} <= set(files), files
    assert not {"model.safetensors", "pytorch_model.bin"} & set(files), files


def test_a_save_model_of_its_own_is_unchanged(trainer: Any, tmp_path: Path) -> None:
    deepspeed_save.save_files_once(trainer, _run(OFFLOAD3))
    trainer.save_model(str(tmp_path / "final"))
    assert trainer.model_wrapped.saves == [str(tmp_path / "final")]


def test_a_rank_that_does_not_write_leaves_the_files_to_the_one_that_does(
        trainer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers 5.17 (the GPU machine's) calls ``_save`` on the writing rank only and its
    ``_save`` assumes it is that rank: the wrapper does the same."""
    from transformers import TrainingArguments

    deepspeed_save.save_files_once(trainer, _run(OFFLOAD3))
    written: list[str] = []
    monkeypatch.setattr(trainer, "_save", lambda folder, state_dict=None: written.append(folder))
    folder = str(Path(trainer.args.output_dir) / "checkpoint-1")
    monkeypatch.setattr(trainer, "_save_optimizer_and_scheduler", lambda output_dir: None)
    monkeypatch.setattr(TrainingArguments, "should_save", property(lambda self: False))
    trainer._save_checkpoint(trainer.model, trial=None)  # save_model inside, as a rank runs it
    assert written == [] and trainer.model_wrapped.saves == []
    monkeypatch.setattr(TrainingArguments, "should_save", property(lambda self: True))
    trainer._save_checkpoint(trainer.model, trial=None)
    assert written == [folder]


def test_an_internal_call_outside_a_checkpoint_still_writes_deepspeed_s_files(
        trainer: Any, tmp_path: Path) -> None:
    """transformers' push_to_hub and Ray Tune save call save_model(_internal_call=True) with no
    optimizer save after it: there the fallback's own DeepSpeed save must stay."""
    deepspeed_save.save_files_once(trainer, _run(OFFLOAD3))
    trainer.save_model(str(tmp_path / "pushed"), _internal_call=True)
    assert trainer.model_wrapped.saves == [str(tmp_path / "pushed")]
    saves, _ = _checkpoint(trainer)  # and inside a checkpoint, once, as before
    assert saves == [str(tmp_path / "pushed"), str(Path(trainer.args.output_dir) / "checkpoint-1")]


@pytest.fixture
def zero2_trainer(trainer: Any) -> Any:
    """The same Trainer under ZeRO-2: accelerate hands save_model the full state dict."""
    trainer.model_wrapped.config = {"zero_optimization": {"stage": 2}}
    trainer.accelerator.get_state_dict = lambda engine: trainer.model.state_dict()
    return trainer


def test_zero2_transformers_alone_writes_the_weights_beside_deepspeed_s_files(
        zero2_trainer: Any) -> None:
    saves, files = _checkpoint(zero2_trainer)
    assert len(saves) == 1 and "model.safetensors" in files, files  # the copy left out below


def test_zero2_with_the_wrapper_the_checkpoint_is_deepspeed_s_files_alone(
        zero2_trainer: Any) -> None:
    line = deepspeed_save.save_files_once(zero2_trainer, _run({"zero_stage": 2}))
    assert line and line.startswith("ZeRO-2 checkpoints hold DeepSpeed's files alone")
    saves, files = _checkpoint(zero2_trainer)
    assert saves == [str(Path(zero2_trainer.args.output_dir) / "checkpoint-1")]
    assert {"config.json", "trainer_state.json", "global_step1"} <= set(files), files
    assert not {"model.safetensors", "pytorch_model.bin"} & set(files), files
