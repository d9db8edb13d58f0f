"""runtime/shared/attempt_nodes.py: the node task lays its attempt out at the count Slurm
granted (min_nodes, issue #60) and hands that count to its ranks, which apply the same rule
(rundir/reshard.record_at) to the same value; a run without min_nodes keeps run.json's count
whatever the allocation (a dedicated server node is in it)."""

from __future__ import annotations

import pytest

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.node.task import torchrun_argv
from hpc_grpo.runtime.shared import attempt_nodes


def _record(min_nodes: int = 2, zero: int | None = None) -> RunRecord:
    return RunRecord.from_dict({
        "schema": 1, "run_id": "r1", "run_dir": "/runs/r1", "model": "m", "dataset": {"name": "d"},
        "nodes": 3, "min_nodes": min_nodes, "procs_per_node": 1, "checkpoint_bytes": 10**9,
        "deepspeed": {"zero_stage": zero, "offload_optimizer": False} if zero else None,
        "grpo_config": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                        "num_generations": 4}})


def test_the_node_task_takes_slurms_count_and_torchrun_follows() -> None:
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "MASTER_ADDR": "node1",
           "MASTER_PORT": "29611"}
    run = attempt_nodes.for_node_task(_record(), env)
    assert (run.nodes, run.world_size, len(run.ranks)) == (2, 2, 2)
    argv = torchrun_argv(run, env)
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert run.grpo_config["gradient_accumulation_steps"] == 2  # 12 completions a step kept


def test_the_ranks_take_the_node_tasks_count() -> None:
    run = attempt_nodes.for_rank(_record(), {attempt_nodes.ATTEMPT_NODES: "2",
                                             "SLURM_JOB_NUM_NODES": "3"})  # the export wins
    assert (run.nodes, run.grpo_config["per_device_train_batch_size"]) == (2, 3)
    assert attempt_nodes.for_rank(_record(), {}).nodes == 3  # started by hand: run.json's


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_NUM_NODES": "3"}, {"SLURM_NNODES": "3"}])
def test_the_full_count_or_no_slurm_is_run_json(env: dict[str, str]) -> None:
    record = _record()
    assert attempt_nodes.for_node_task(record, env) is record


def test_without_min_nodes_the_allocation_is_not_read() -> None:
    record = _record(min_nodes=0)  # e.g. a dedicated vLLM server node: 4 in the job, 3 train
    assert attempt_nodes.for_node_task(record, {"SLURM_JOB_NUM_NODES": "4"}) is record


def test_slurms_older_name_is_read_too() -> None:
    assert attempt_nodes.granted({"SLURM_NNODES": "2"}) == 2
    assert attempt_nodes.granted({"SLURM_JOB_NUM_NODES": "x"}) is None


@pytest.mark.parametrize("nodes", ["2", "3"])
def test_a_zero_run_leaves_room_for_its_conversion_at_every_count(nodes: str) -> None:
    """Growing back to 3 converts a checkpoint saved at 2 as shrinking does: both attempts get
    the conversion's time (reshard.with_conversion_time), node task and ranks alike."""
    record = _record(zero=2)
    for run in (attempt_nodes.for_node_task(record, {"SLURM_JOB_NUM_NODES": nodes}),
                attempt_nodes.for_rank(record, {attempt_nodes.ATTEMPT_NODES: nodes})):
        assert run.watchdog.startup_s > record.watchdog.startup_s
        assert run.collective_timeout_s >= run.watchdog.startup_s - record.watchdog.startup_s
        assert run.nodes == int(nodes)
