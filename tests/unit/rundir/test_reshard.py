"""rundir/reshard.py: the one rule of which layouts may continue at another world size, and when
a ZeRO checkpoint must be converted (and is converted already) before a job loads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.checkpoints import marker_world_size, write_marker


@pytest.mark.parametrize("zero", [None, 0, 1, 2, 3])
def test_ddp_and_every_zero_stage_may_change_size(zero: int | None) -> None:
    assert reshard.refusal(zero, "colocate") is None


def test_server_mode_and_an_unknown_stage_are_refused_in_one_line() -> None:
    assert "server mode is not resized yet" in (reshard.refusal(None, "server") or "")
    assert reshard.refusal(4, "colocate") == (
        "ZeRO-4 checkpoints have no universal conversion in DeepSpeed (ds_to_universal "
        "converts stages 1, 2, 3)")


@pytest.mark.parametrize(("zero", "saved", "now", "needed"), [
    (2, 4, 2, True), (3, 2, 1, True), (1, 1, 4, True),  # ZeRO at another size
    (2, 2, 2, False),  # the same size: DeepSpeed's own load
    (None, 4, 2, False), (0, 2, 1, False),  # DDP: nothing sharded but the RNG states
    (2, None, 2, False),  # no world size in the marker: taken as the same
])
def test_which_resumes_convert(zero: int | None, saved: int | None, now: int,
                               needed: bool) -> None:
    assert reshard.needs_conversion(zero, saved, now) is needed


def test_the_line_names_the_stage_and_the_numbers() -> None:
    assert reshard.conversion_line(2, 4, 2) == "ZeRO-2 shards converted from 4 to 2 ranks"


def test_the_saved_world_size_is_the_completion_markers(tmp_path: Path) -> None:
    assert marker_world_size(tmp_path) is None
    write_marker(tmp_path, 3, 4)
    assert marker_world_size(tmp_path) == 4


def _checkpoint(tmp_path: Path) -> Path:
    checkpoint = tmp_path / "checkpoint-3"
    (checkpoint / "global_step3").mkdir(parents=True)
    (checkpoint / "latest").write_text("global_step3")
    return checkpoint


def test_a_conversion_counts_once_marked_and_named_in_latest_universal(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path)
    assert reshard.deepspeed_tag(checkpoint) == "global_step3"
    folder = reshard.universal_folder(checkpoint, "global_step3")
    assert folder == checkpoint / "global_step3_universal"
    (folder / "zero").mkdir(parents=True)
    (checkpoint / "latest_universal").write_text("global_step3_universal")
    assert not reshard.converted(checkpoint, "global_step3")  # ds_to_universal's end, no marker
    reshard.mark_converted(checkpoint, "global_step3", 4, 1.234)
    assert reshard.converted(checkpoint, "global_step3")
    marker = json.loads((folder / reshard.UNIVERSAL_MARKER).read_text())
    assert (marker["tag"], marker["from_world_size"], marker["seconds"]) == ("global_step3", 4, 1.23)
    assert not reshard.clear_unfinished(checkpoint, "global_step3")  # finished: kept
    assert folder.is_dir()
    (checkpoint / "latest_universal").write_text("elsewhere")  # another tag's conversion
    assert not reshard.converted(checkpoint, "global_step3")


def test_a_conversion_killed_half_way_is_removed_never_reused(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path)
    folder = reshard.universal_folder(checkpoint, "global_step3")
    (folder / "tmp").mkdir(parents=True)  # ds_to_universal's work folder, killed inside
    assert not reshard.converted(checkpoint, "global_step3")
    assert reshard.clear_unfinished(checkpoint, "global_step3")
    assert not folder.exists() and not (checkpoint / "latest_universal").exists()
    assert (checkpoint / "global_step3").is_dir()  # the saved shards stay
    assert not reshard.clear_unfinished(checkpoint, "global_step3")  # nothing left to clear


def test_no_tag_without_deepspeeds_latest_file(tmp_path: Path) -> None:
    assert reshard.deepspeed_tag(tmp_path) is None
    (tmp_path / "latest").write_text("global_step9")  # names no folder
    assert reshard.deepspeed_tag(tmp_path) is None


def test_the_batch_split_keeps_both_batches_with_the_largest_per_device_batch() -> None:
    """rundir's one rule (#60): the launcher's resume --nodes applies it, a node task that
    started on fewer nodes will too. 8 x 1 x 4 ranks = 32 completions a step: at 3 ranks no
    whole split; at 8 ranks 4 x 1; a generation batch of 64 (steps_per_generation 2) kept too."""
    from hpc_grpo.rundir.reshard import split_batch

    grpo = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
    kw = {"per_device_default": 8, "accumulation_default": 1}
    split, global_batch, generation = split_batch(grpo, 4, 8, **kw)
    assert (global_batch, generation) == (32, 32) and split is not None
    assert split.grpo() == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}
    split, *_ = split_batch(grpo, 4, 2, **kw)  # fewer ranks: accumulate, never a larger batch
    assert split is not None and split.grpo() == {"per_device_train_batch_size": 8,
                                                  "gradient_accumulation_steps": 2}
    assert split_batch(grpo, 4, 3, **kw)[0] is None
    generating = {**grpo, "steps_per_generation": 2}
    split, global_batch, generation = split_batch(generating, 4, 2, **kw)
    assert (global_batch, generation) == (32, 64) and split is not None
    assert split.grpo()["steps_per_generation"] == 4
