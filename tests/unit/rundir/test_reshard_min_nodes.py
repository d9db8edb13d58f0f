"""rundir/reshard.py's min_nodes rule (issue #60): the record of an attempt Slurm started on
fewer nodes, the one rule the node task and every rank apply, and the runs it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.placement import rank_row


def _record(nodes: int = 3, procs: int = 2, min_nodes: int = 2, zero: int | None = None,
            mode: str = "colocate", tp: int = 1, **grpo: Any) -> RunRecord:
    split = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, **grpo}
    return RunRecord.from_dict({
        "schema": 1, "run_id": "r", "run_dir": "/runs/r", "model": "m", "seed": 42,
        "dataset": {"name": "builtin:digits", "prompt_column": "prompt", "split": "train"},
        "nodes": nodes, "min_nodes": min_nodes, "procs_per_node": procs, "device": "cpu",
        "ranks": [rank_row(r, procs, tp).to_dict() for r in range(nodes * procs)],
        "grpo_config": {"num_generations": 4, "max_steps": 9, **split},
        "vllm": {"mode": mode, "tensor_parallel_size": tp},
        "deepspeed": {"zero_stage": zero, "offload_optimizer": False} if zero else None})


def test_the_full_count_is_the_record_itself() -> None:
    record = _record()
    assert reshard.record_at(record, 3) is record


def test_fewer_nodes_lay_out_the_ranks_and_keep_the_global_batch() -> None:
    record = _record()  # 3 x 2 ranks, 4 x 1 a rank: 24 completions a step
    at = reshard.record_at(record, 2)
    assert (at.nodes, at.procs_per_node, at.world_size, at.min_nodes) == (2, 2, 4, 2)
    assert at.ranks == tuple(rank_row(r, 2, 1) for r in range(4))
    grpo = at.grpo_config
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (3, 2)
    assert grpo["per_device_train_batch_size"] * grpo["gradient_accumulation_steps"] \
        * at.world_size == 24
    assert (grpo["num_generations"], grpo["max_steps"]) == (4, 9)  # the rest as it was
    assert record.grpo_config["per_device_train_batch_size"] == 4  # the record itself unchanged


def test_tp_groups_follow_the_same_rule() -> None:
    at = reshard.record_at(_record(procs=2, tp=2), 2)
    assert [(r.tp_group, r.vllm_seed) for r in at.ranks] == [(0, 0), (0, 0), (1, 1), (1, 1)]


@pytest.mark.parametrize("nodes", [0, 1, 4])
def test_a_count_the_script_did_not_ask_for_is_an_error(nodes: int) -> None:
    with pytest.raises(ValueError, match=f"this attempt has {nodes} node"):
        reshard.record_at(_record(), nodes)


def test_a_run_without_min_nodes_never_changes_size() -> None:
    with pytest.raises(ValueError, match="allows 3-3"):
        reshard.record_at(_record(min_nodes=0), 2)
    assert reshard.min_nodes_refusal(_record(min_nodes=0)) is None


def test_every_count_in_the_range_must_split_the_batch() -> None:
    # 1 a rank at 3 x 1: 3 completions a step do not split over 2 ranks
    why = reshard.min_nodes_refusal(_record(procs=1, per_device_train_batch_size=1))
    assert why == ("the global batch 3 (per-device 1 x accumulation 1 x 3 ranks) does not split "
                   "over 2 ranks (2 node(s)) into whole per-device batches")
    # 4 nodes down to 2: 4 x 4 = 16 splits over 2 ranks but not over 3
    why = reshard.min_nodes_refusal(_record(nodes=4, procs=1))
    assert why is not None and "over 3 ranks (3 node(s))" in why
    assert reshard.min_nodes_refusal(_record(nodes=4, procs=1, min_nodes=4)) is not None
    assert reshard.min_nodes_refusal(  # 6 x 4 = 24 over 3 ranks (4 x 2) and 2 (6 x 2)
        _record(nodes=4, procs=1, per_device_train_batch_size=6)) is None


def test_layouts_that_cannot_resize_are_refused() -> None:
    assert "server mode" in (reshard.min_nodes_refusal(_record(mode="server")) or "")
    assert "ZeRO-4" in (reshard.min_nodes_refusal(_record(zero=4)) or "")
    assert reshard.min_nodes_refusal(_record(zero=3)) is None
    why = reshard.min_nodes_refusal(_record(steps_per_generation=2))
    assert why is not None and "inside a generation block" in why
    assert reshard.min_nodes_refusal(_record(steps_per_generation=1)) is None
