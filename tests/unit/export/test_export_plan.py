"""export/plan.py and layout.py: which checkpoint, which layout, sizes, and the refusals, from
files alone (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.export import layout, plan
from tests.unit.export import fakes


def test_newest_complete_checkpoint_is_picked_over_a_newer_cut_off_one(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 2)
    fakes.checkpoint(run, 4)
    fakes.checkpoint(run, 6, complete=False)  # files, no marker: a save cut off half-way
    chosen = plan.build(run, fakes.run_record(run), None, None, None, False)
    assert chosen.step == 4 and chosen.checkpoint.name == "checkpoint-4"
    assert chosen.target == run / "export" / "step-4"


@pytest.mark.parametrize(("step", "words"), [(6, "checkpoint-6 of run tiny-0001 is incomplete"),
                                             (8, "has no checkpoint-8")])
def test_an_incomplete_or_missing_step_is_refused_in_one_line(tmp_path: Path, step: int,
                                                              words: str) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    fakes.checkpoint(run, 6, complete=False)
    with pytest.raises(UserError) as err:
        plan.build(run, fakes.run_record(run), step, None, None, False)
    assert words in err.value.message and "complete checkpoints: 4" in err.value.hint
    assert "\n" not in err.value.one_line()


def test_a_marker_naming_another_step_does_not_make_a_checkpoint_complete(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    folder = fakes.checkpoint(run, 4)
    (folder / "hpc_grpo_complete.json").write_text(json.dumps({"step": 2}))
    with pytest.raises(UserError, match="no complete checkpoint"):
        plan.build(run, fakes.run_record(run), None, None, None, False)


@pytest.mark.parametrize(("kind", "expected"), [("full", "full"), ("zero", "zero"), ("lora", "lora")])
def test_layouts_from_file_names(tmp_path: Path, kind: str, expected: str) -> None:
    folder = fakes.checkpoint(fakes.run_dir(tmp_path), 2, kind)
    assert layout.detect(layout.file_names(folder)) == expected


def test_a_checkpoint_without_weights_is_refused() -> None:
    with pytest.raises(UserError, match="no model weights"):
        layout.detect(["trainer_state.json", "optimizer.pt"])


def test_sizes_follow_the_dtype_and_the_device(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path, device="cuda")
    fakes.checkpoint(run, 2)
    record = fakes.run_record(run)
    gpu = plan.build(run, record, None, str(tmp_path / "a"), None, False)
    fp32 = plan.build(run, record, None, str(tmp_path / "b"), "fp32", False)
    assert gpu.dtype == "bfloat16" and fp32.dtype == "float32" and gpu.num_params == 105
    assert fp32.disk_bytes - gpu.disk_bytes == 105 * 2
    assert gpu.host_bytes == 105 * 8


def test_deepspeed_shards_only_count_parameters_from_config_json(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 2, "zero")
    planned = plan.build(run, fakes.run_record(run), None, None, None, False)
    assert planned.layout == "zero" and planned.num_params == 107_072  # builtin:tiny's count


def test_shards_of_an_architecture_the_planner_does_not_model_count_from_their_sizes(
        tmp_path: Path) -> None:
    """A ZeRO-1/2 or ZeRO-3 checkpoint has no model file to read headers from; a config the
    planner refuses (a mixture of experts) is counted from the optimizer files' 12 B/param."""
    run = fakes.run_dir(tmp_path)
    folder = fakes.checkpoint(run, 2, "zero")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"num_experts": 8,
                                                              "model_type": "qwen2_moe"}))
    for rank in (0, 1):
        (folder / "global_step2" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(
            b"x" * 12 * 500)
    planned = plan.build(run, fakes.run_record(run), None, None, None, False)
    assert planned.layout == "zero" and planned.num_params == 1000


def test_lora_merges_into_the_base_by_default_and_sizes_it_so(tmp_path: Path) -> None:
    base = fakes.base_model(tmp_path)
    run = fakes.run_dir(tmp_path, model=str(base))
    fakes.checkpoint(run, 2, "lora")
    record = fakes.run_record(run)
    merged = plan.build(run, record, None, None, None, False)
    adapter = plan.build(run, record, None, None, None, True)
    assert (merged.mode, merged.num_params, merged.base) == ("merged", 1000, str(base))
    assert (adapter.mode, adapter.num_params) == ("adapter", 64)
    assert adapter.target.name == "step-2-adapter" and adapter.host_bytes == 1000 * 8


def test_the_line_says_what_the_folder_will_hold_not_the_checkpoints_size(tmp_path: Path) -> None:
    """Issue #58: the line said "about 1.4 MiB on disk" for the tiny model, whose checkpoint
    is 1.4 MB and whose exported folder 0.45 MB: the free-space margin (1 MiB) was counted as
    the folder's. The folder: the weights in the written dtype, config, tokenizer, model card
    and reward curve; an adapter is its own file as it is."""
    base = fakes.base_model(tmp_path)
    run = fakes.run_dir(tmp_path, model=str(base))
    (run / "reward_curve.png").write_bytes(b"p" * 3000)
    fakes.checkpoint(run, 2)
    full = plan.build(run, fakes.run_record(run), None, None, "fp32", False)
    small = len(json.dumps(fakes.TINY_CONFIG)) + len("{}")  # config.json, tokenizer.json
    assert (full.weights_bytes, full.other_bytes) == (105 * 4, small + 3000 + plan.CARD_BYTES)
    assert full.disk_bytes == full.weights_bytes + full.other_bytes + plan.MARGIN_BYTES
    assert "105 parameters; the folder will hold about 7.6 KiB (model.safetensors 0.4 KiB, " \
        "config, tokenizer, model card and reward curve 7.2 KiB); the export holds about " \
        "0.8 KiB of host memory" in full.line(), full.line()
    lora = fakes.checkpoint(run, 4, "lora")
    adapter = plan.build(run, fakes.run_record(run), None, None, None, True)
    assert adapter.weights_bytes == (lora / "adapter_model.safetensors").stat().st_size
    assert "(adapter_model.safetensors " in adapter.line()


def test_adapter_of_a_full_checkpoint_and_a_missing_base_are_refused(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path, model=str(tmp_path / "gone"))
    fakes.checkpoint(run, 2)
    with pytest.raises(UserError, match="holds full weights, not a LoRA adapter"):
        plan.build(run, fakes.run_record(run), None, None, None, True)
    lora_run = fakes.run_dir(tmp_path / "x", model="Qwen/Qwen2.5-7B")
    fakes.checkpoint(lora_run, 2, "lora")
    with pytest.raises(UserError, match="not a model folder on this machine"):
        plan.build(lora_run, fakes.run_record(lora_run), None, None, None, False)


def test_a_non_empty_target_is_refused_an_empty_one_is_taken(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 2)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert plan.build(run, fakes.run_record(run), None, str(empty), None, False).target == empty
    (empty / "model.safetensors").write_text("someone else's")
    with pytest.raises(UserError, match="already exists and is not empty"):
        plan.build(run, fakes.run_record(run), None, str(empty), None, False)


def test_too_little_free_disk_is_refused(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 2)
    planned = plan.build(run, fakes.run_record(run), None, None, None, False)
    plan.refuse_space(planned, planned.disk_bytes)  # exactly enough: fine
    with pytest.raises(UserError, match=r"the export needs 1\.\d MiB but 1\.0 KiB are free"):
        plan.refuse_space(planned, 1000)


def test_safetensors_header_counts_elements(tmp_path: Path) -> None:
    fakes.safetensors(tmp_path / "x.safetensors", {"a": [3, 4], "b": [2, 2, 2]}, dtype="BF16")
    assert layout.safetensors_elements(tmp_path / "x.safetensors") == 20


def test_a_host_short_of_memory_gets_a_warning_not_a_refusal() -> None:
    assert plan.memory_note(8 * 2**30, 16 * 2**30) == "" and plan.memory_note(8, None) == ""
    assert plan.memory_note(8 * 2**30, 2**30).startswith(
        "the export holds about 8.00 GiB in host memory but 1.00 GiB are available")


def test_the_cards_reward_history_keeps_first_last_and_stops_at_the_step() -> None:
    from hpc_grpo.export.card import history

    rows = [{"step": s, "reward_mean": float(s)} for s in range(1, 101)]
    rows.insert(5, {"step": 6, "reward_mean": None})  # a step trained on an earlier generation
    points = history(rows, 60)
    assert len(points) == 12 and points[0] == (1, 1.0) and points[-1] == (60, 60.0)
    assert [s for s, _ in points] == sorted({s for s, _ in points})
    assert history(rows[:3], 60) == [(1, 1.0), (2, 2.0), (3, 3.0)]
