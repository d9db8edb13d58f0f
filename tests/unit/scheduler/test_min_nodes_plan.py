"""min_nodes through the plan (issue #60): the script asks Slurm for --nodes=MIN-MAX, run.json
carries the count and the batch values the nodes split anew, and a run some count in the range
cannot take is refused in one line before anything is written, its memory at the fewest nodes
included."""

from __future__ import annotations

import pytest

from hpc_grpo import api
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import inputs, machine
from hpc_grpo.scheduler import slurm
from hpc_grpo.scheduler.render import sbatch_nodes


@pytest.fixture(autouse=True)
def unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's disk and no probe of this machine's GPUs or of sinfo (as the golden scripts)."""
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))
    monkeypatch.setattr(machine, "probe", lambda: machine.Machine(
        (), cpus=2, memory_mib=16384, gpu_source="nvidia-smi not found"))
    monkeypatch.setattr(slurm, "partition_gres", lambda partition: None)


def _prepare(site: str = "sandbox", sets: tuple[str, ...] = ("num_generations=4",),
             **flags: object) -> api.Prepared:
    return api.prepare(api.Request(
        site=site, flags={"model": "builtin:tiny", "procs_per_node": 1, **flags},
        run_id="mn-0001", output_root="/shared/runs", python="/opt/venv/bin/python", sets=sets))


def test_the_value_sbatch_gets() -> None:
    assert sbatch_nodes(3, 0) == "3"
    assert sbatch_nodes(3, 2) == "2-3"


def test_the_script_asks_for_a_range_and_the_record_carries_it() -> None:
    prepared = _prepare(nodes=3, min_nodes=2, sets=("num_generations=4",
                                                    "per_device_train_batch_size=4"))
    assert "\n#SBATCH --nodes=2-3\n" in prepared.script
    # a task count fixed per node would fix the job's at 2 tasks: Slurm then granted 2 nodes
    assert "--ntasks-per-node" not in prepared.script
    assert "# min_nodes 2: an attempt starts on 2-3 nodes" in prepared.summary
    record = prepared.plan.run_record("mn-0001", "/shared/runs/mn-0001")
    assert (record.nodes, record.min_nodes) == (3, 2)
    # TRL's default accumulation written out: the nodes' rule needs no planner table
    assert record.grpo_config["gradient_accumulation_steps"] == 1
    assert record.grpo_config["per_device_train_batch_size"] == 4


def test_a_fixed_count_is_rendered_as_before() -> None:
    prepared = _prepare(nodes=3)
    assert "\n#SBATCH --nodes=3\n#SBATCH --ntasks-per-node=1\n" in prepared.script
    record = prepared.plan.run_record("mn-0001", "/shared/runs/mn-0001")
    assert record.min_nodes == 0 and "gradient_accumulation_steps" not in record.grpo_config


@pytest.mark.parametrize(("flags", "sets", "said"), [
    ({"nodes": 3, "min_nodes": 3}, (), "min_nodes: min_nodes 3 must be at least 1 and below nodes 3"),
    ({"nodes": 3, "min_nodes": 2}, ("per_device_train_batch_size=1", "num_generations=3"),
     "min_nodes: the global batch 3 (per-device 1 x accumulation 1 x 3 ranks) does not split "
     "over 2 ranks (2 node(s))"),
    ({"nodes": 3, "min_nodes": 2, "vllm_mode": "server"}, (), "min_nodes: server mode"),
    ({"nodes": 3, "min_nodes": 2}, ("num_generations=4", "steps_per_generation=2"),
     "min_nodes: a generation batch other than the global batch"),
])
def test_refused_in_one_line(flags: dict[str, object], sets: tuple[str, ...], said: str) -> None:
    with pytest.raises(UserError) as refused:
        _prepare(sets=sets, **flags)
    assert said in refused.value.one_line()
    assert "\n" not in refused.value.one_line()


def test_the_job_at_the_fewest_nodes_must_fit() -> None:
    """72B on h100-pyxis: 4 nodes fit, 1 node's offloaded state does not (the memory plan of the
    smallest job, planned like any other)."""
    with pytest.raises(UserError) as refused:
        api.prepare(api.Request(
            site="h100-pyxis", flags={"model": "Qwen2.5-Math-72B", "nodes": 4, "min_nodes": 1,
                                      "time": "06:00:00"},
            run_id="mn-0001", output_root="/shared/runs", python="/opt/venv/bin/python",
            sets=("num_generations=8", "per_device_train_batch_size=6")))
    assert refused.value.one_line().startswith(
        "error: min_nodes: the job at 1 node(s) is refused: Qwen2.5-Math-72B does not fit on 1 node")
    api.prepare(api.Request(  # at 2 nodes it fits: accepted
        site="h100-pyxis", flags={"model": "Qwen2.5-Math-72B", "nodes": 4, "min_nodes": 2,
                                  "time": "06:00:00"},
        run_id="mn-0001", output_root="/shared/runs", python="/opt/venv/bin/python",
        sets=("num_generations=8", "per_device_train_batch_size=6")))
