"""planner/resume.py at another world size: which layout changes a resume may make, the batch
split it replans (the global and the generation batch kept, the per-device batch never larger),
and the refusals, one line each with the numbers."""

from __future__ import annotations

from typing import Any

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.planner import resume as rules
from hpc_grpo.rundir.contract import RunRecord


def _record(nodes: int, procs: int, zero: int | None = None, mode: str = "colocate",
            **grpo: Any) -> RunRecord:
    return RunRecord.from_dict({
        "schema": 1, "run_id": "r", "run_dir": "/runs/r", "model": "m", "seed": 42,
        "dataset": {"name": "builtin:digits", "prompt_column": "prompt", "split": "train"},
        "nodes": nodes, "procs_per_node": procs, "ranks": [], "device": "cuda",
        "grpo_config": {"num_generations": 4, **grpo}, "vllm": {"mode": mode},
        "deepspeed": {"zero_stage": zero, "offload_optimizer": False} if zero else None})


def test_the_same_layout_is_no_resize() -> None:
    assert rules.resize(_record(2, 4, per_device_train_batch_size=8), 2, 4) is None


@pytest.mark.parametrize(("was", "now", "grpo", "split"), [
    # shrink: the per-device batch stays, the accumulation takes the ranks that left
    ((1, 2), (1, 1), {"per_device_train_batch_size": 8}, (8, 2)),
    ((4, 8), (2, 8), {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
     (4, 4)),
    # grow: the accumulation falls first, then the per-device batch
    ((2, 8), (4, 8), {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
     (4, 1)),
    ((1, 1), (1, 2), {"per_device_train_batch_size": 8}, (4, 1)),
    # the largest per-device batch not above the run's that splits the batch: 24 over 4 ranks
    ((1, 3), (1, 4), {"per_device_train_batch_size": 8}, (6, 1)),
    # TRL's default per-device batch (8) when the run left it unset
    ((1, 2), (1, 4), {}, (4, 1)),
])
def test_the_split_keeps_the_global_batch(was: tuple[int, int], now: tuple[int, int],
                                          grpo: dict[str, int], split: tuple[int, int]) -> None:
    old = _record(*was, **grpo)
    change = rules.resize(old, *now)
    assert change is not None
    got = (change.grpo["per_device_train_batch_size"], change.grpo["gradient_accumulation_steps"])
    assert got == split
    world = now[0] * now[1]
    assert got[0] * got[1] * world == change.global_batch == (
        grpo.get("per_device_train_batch_size", 8) * grpo.get("gradient_accumulation_steps", 1)
        * was[0] * was[1])
    assert got[0] <= grpo.get("per_device_train_batch_size", 8)
    assert "steps_per_generation" not in change.grpo  # TRL's default follows the accumulation


def test_the_line_says_what_changed() -> None:
    change = rules.resize(_record(1, 2, per_device_train_batch_size=8), 1, 1)
    assert change is not None
    assert change.line() == ("resumed at 1 x 1 from 1 x 2, global batch 16 kept: "
                             "per-device 8 x accumulation 2")


def test_a_set_steps_per_generation_is_replanned_to_keep_the_generation_batch() -> None:
    # 2 x 4 ranks x 4 per device: 32 a step, 4 steps a generation: 128 completions each
    old = _record(2, 4, per_device_train_batch_size=4, steps_per_generation=4)
    change = rules.resize(old, 1, 4)
    assert change is not None
    assert change.grpo == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                           "steps_per_generation": 8}
    assert (change.global_batch, change.generation_batch) == (32, 128)
    assert "generation batch 128" in change.line()
    # generation_batch_size set instead: TRL derives steps_per_generation from it, kept as is
    old = _record(2, 4, per_device_train_batch_size=4, generation_batch_size=128)
    change = rules.resize(old, 1, 4)
    assert change is not None and "steps_per_generation" not in change.grpo


def test_no_split_is_refused_with_the_numbers() -> None:
    old = _record(1, 2, per_device_train_batch_size=3)  # 6 completions a step
    with pytest.raises(UserError) as caught:
        rules.resize(old, 1, 4)
    assert caught.value.message == (
        "cannot change the layout from 1 node(s) x 2 process(es) to 1 x 4: the global batch 6 "
        "(per-device 3 x accumulation 1 x 2 ranks) does not split over 4 ranks into whole "
        "per-device batches")
    assert "divides 6" in caught.value.hint
    # the generation batch must split too: 8 a step splits over 8 ranks, 12 a generation not
    old = _record(1, 2, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                  generation_batch_size=12)
    with pytest.raises(UserError, match="global batch 8 .* and generation batch 12 does not "
                                        "split over 8 ranks"):
        rules.resize(old, 2, 4)


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize(("was", "now", "split", "ranks"), [
    ((4, 8), (2, 8), (8, 2), "from 32 to 16 ranks"),  # shrink: the accumulation doubles
    ((1, 2), (1, 1), (8, 2), "from 2 to 1 ranks"),
    ((2, 8), (4, 8), (4, 1), "from 16 to 32 ranks"),  # grow: the per-device batch halves
])
def test_zero_shards_are_resized_naming_the_conversion(
        zero: int, was: tuple[int, int], now: tuple[int, int], split: tuple[int, int],
        ranks: str) -> None:
    change = rules.resize(_record(*was, zero=zero, per_device_train_batch_size=8), *now)
    assert change is not None and change.zero_stage == zero
    assert (change.grpo["per_device_train_batch_size"],
            change.grpo["gradient_accumulation_steps"]) == split
    assert change.global_batch == 8 * was[0] * was[1]  # kept
    assert change.line().endswith(f"; ZeRO-{zero} shards converted {ranks}")
    assert "\n" not in change.line()


def test_a_ddp_change_names_no_conversion() -> None:
    change = rules.resize(_record(1, 2, per_device_train_batch_size=8), 1, 1)
    assert change is not None and change.zero_stage is None and "ZeRO" not in change.line()


def test_server_mode_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="server mode is not resized yet") as caught:
        rules.resize(_record(3, 8, mode="server", per_device_train_batch_size=8), 2, 8)
    assert "\n" not in caught.value.one_line()


def _resumed(old: RunRecord, nodes: int, procs: int, **grpo: Any) -> RunRecord:
    data = old.to_dict()
    data.update(nodes=nodes, procs_per_node=procs, world_size=nodes * procs,
                grpo_config={**data["grpo_config"], **grpo})
    return RunRecord.from_dict(data)


def test_unchangeable_takes_the_replanned_split_and_nothing_else() -> None:
    old = _record(1, 2, per_device_train_batch_size=8)
    replanned = _resumed(old, 1, 1, gradient_accumulation_steps=2)
    assert rules.unchangeable(old, replanned) == []
    # another split of the same 16 (16 x 1) is not the plan's: named with the plan's value
    other = _resumed(old, 1, 1, per_device_train_batch_size=16)
    lines = [p.message for p in rules.unchangeable(old, other)]
    assert "cannot change per_device_train_batch_size from 8 to 16" in lines[0]
    assert any("gradient_accumulation_steps from 2 to unset" in line for line in lines)
    # the run's split at the new world size is a change of the global batch
    lines = [p.message for p in rules.unchangeable(old, _resumed(old, 1, 1))]
    assert lines == ["cannot change gradient_accumulation_steps from 2 to unset: the "
                     "checkpoint's data position counts these micro-steps"]
    # a ZeRO run too, with its replanned split; its stage still cannot change
    zero = _record(2, 2, zero=2, per_device_train_batch_size=8)
    assert rules.unchangeable(zero, _resumed(zero, 1, 2, gradient_accumulation_steps=2)) == []
    other_stage = _record(2, 2, zero=3, per_device_train_batch_size=8)
    data = _resumed(other_stage, 1, 2, gradient_accumulation_steps=2).to_dict()
    lines = [p.message for p in rules.unchangeable(zero, RunRecord.from_dict(data))]
    assert lines == ["cannot change the ZeRO stage from 2 to 3: the checkpoint's optimizer "
                     "state is laid out for its stage"]


def test_a_checkpoint_inside_a_generation_block_is_refused() -> None:
    change = rules.resize(_record(1, 2, per_device_train_batch_size=8, steps_per_generation=2),
                          1, 1)
    assert change is not None
    refused = rules.mid_generation(30, change)
    assert refused.message == (
        "cannot change the layout from 1 node(s) x 2 process(es) to 1 x 1 at checkpoint-30: it "
        "was saved inside a generation block, its buffered completions are split over 2 ranks")
