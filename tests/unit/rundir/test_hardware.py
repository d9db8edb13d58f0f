"""The plan's hardware assumptions against a node's (issue #29): the pure comparison, the line
every rank raises alike (so it is a configuration error, never retried), and run.json's block."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import HardwareBlock, RunRecord
from hpc_grpo.rundir.hardware import NodeFacts, compare, gpus_needed, shortfall_line
from hpc_grpo.runtime.rank.setup import hardware_check
from hpc_grpo.runtime.rank.setup.hardware_check import HardwareShortfall, slurm_memory_gib
from hpc_grpo.runtime.shared import setup_failure

H100_GIB = 85_029_158_912 / 2**30  # what CUDA reports for an "80 GB" H100: 79.19 GiB
SANDBOX_GPU = HardwareBlock(gpus_per_node=1, gpu_memory_gib=139, cpu_memory_gib=120)


def test_a_139_gib_profile_on_an_80_gb_card_is_a_shortfall_with_both_numbers() -> None:
    verdict = compare(SANDBOX_GPU, NodeFacts(host="n0", gpus=1, gpu_memory_gib=H100_GIB,
                                             cpu_memory_gib=251.5))
    assert not verdict.ok
    (short,) = verdict.shortfalls
    assert short.text() == "GPU memory 79.2 GiB < planned 139 GiB (gpu_memory_gib)"
    assert any("CPU memory 252 GiB" in note for note in verdict.notes)  # more: a note only


@pytest.mark.parametrize(("planned", "found"), [
    (80, H100_GIB),  # an "80 GB" card: 1% below 80 GiB, within the 5% tolerance
    (141, 139.8),  # an H200
    (40, 39.4),  # an A100 40GB
])
def test_gb_class_cards_pass_their_profile_number(planned: float, found: float) -> None:
    assert compare(HardwareBlock(1, planned, 0), NodeFacts(gpus=1, gpu_memory_gib=found)).ok


def test_more_than_planned_is_a_note_not_an_error() -> None:
    verdict = compare(HardwareBlock(4, 80, 256), NodeFacts(gpus=8, gpu_memory_gib=139.8,
                                                           cpu_memory_gib=2000))
    assert verdict.ok
    assert len(verdict.notes) == 3, verdict.notes


def test_fewer_gpus_and_a_slurm_memory_limit_below_the_profile_are_shortfalls() -> None:
    verdict = compare(HardwareBlock(8, 80, 1800),
                      NodeFacts(gpus=4, gpu_memory_gib=H100_GIB, cpu_memory_gib=2015,
                                job_memory_gib=500, job_memory_source="Slurm's memory for the job"))
    assert [s.text() for s in verdict.shortfalls] == [
        "GPUs per node 4 < planned 8 (gpus_per_node)",
        "CPU memory 500 GiB (Slurm's memory for the job) < planned 1800 GiB (cpu_memory_gib)"]


def test_a_256_gib_node_showing_251_in_meminfo_passes() -> None:
    assert compare(HardwareBlock(0, 0, 256), NodeFacts(cpu_memory_gib=251.5)).ok


def test_nothing_planned_or_nothing_probed_checks_nothing() -> None:
    assert compare(HardwareBlock(), NodeFacts(gpus=0, gpu_memory_gib=1, cpu_memory_gib=1)) == \
        compare(SANDBOX_GPU, NodeFacts())
    assert compare(HardwareBlock(), NodeFacts(gpus=0)).ok


def test_the_line_is_one_line_the_same_from_any_rank_and_names_the_fix() -> None:
    short = compare(SANDBOX_GPU, NodeFacts(gpus=1, gpu_memory_gib=H100_GIB)).shortfalls[0]
    pairs = [("gpu-b", short), ("gpu-a", short)]
    line = shortfall_line(pairs)
    assert line == shortfall_line(list(reversed(pairs)))
    assert line == ("the nodes have less than the plan assumed: GPU memory 79.2 GiB < planned "
                    "139 GiB (gpu_memory_gib) on gpu-a, gpu-b: set gpu_memory_gib in the site "
                    "profile to what the nodes have and submit again")
    assert "\n" not in line


def test_slurm_memory_from_the_job_environment() -> None:
    assert slurm_memory_gib({"SLURM_MEM_PER_NODE": "65536"}) == 64
    assert slurm_memory_gib({"SLURM_MEM_PER_CPU": "4096", "SLURM_CPUS_ON_NODE": "16"}) == 64
    assert slurm_memory_gib({"SLURM_MEM_PER_NODE": "0"}) is None
    assert slurm_memory_gib({}) is None


def _run(**hardware: Any) -> RunRecord:
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": "/x", "model": "m",
                                "dataset": {"name": "d"}, "nodes": 2, "procs_per_node": 1,
                                "device": "cuda", "hardware": hardware})


def test_every_rank_raises_the_same_line_when_any_node_is_short(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 1 has the 80 GB card; node 0 (this rank) is fine, and raises the same line, so
    shared/setup_failure.py's ranks agree and the node task does not retry."""
    import torch.distributed as dist

    run = _run(gpus_per_node=1, gpu_memory_gib=139, cpu_memory_gib=120)
    facts = {"n0": NodeFacts("n0", 1, 140.0, 251.0), "n1": NodeFacts("n1", 1, H100_GIB, 251.0)}
    lines = []
    others = [dataclasses.asdict(s) for s in compare(run.hardware, facts["n1"]).shortfalls]
    for host in ("n0", "n1"):
        monkeypatch.setattr(hardware_check, "probe", lambda *_, h=host: facts[h])
        monkeypatch.setattr(dist, "get_world_size", lambda: 2)

        def gather(out: list[Any], mine: Any, h: str = host) -> None:
            out[:] = [("n0", mine[1] if h == "n0" else []), ("n1", others)]

        monkeypatch.setattr(dist, "all_gather_object", gather)
        with pytest.raises(HardwareShortfall) as caught:
            hardware_check.check(run, device=None, env={})
        lines.append(setup_failure.exception_line(caught.value))
    assert lines[0] == lines[1]
    assert "79.2 GiB < planned 139 GiB" in lines[0] and "on n1" in lines[0]
    records = [{"attempt": "a", "rank": r, "line": lines[r], "configuration":
                setup_failure.looks_like_configuration(HardwareShortfall(lines[r]))} for r in (0, 1)]
    assert setup_failure.common_error(records, 2, "a") == lines[0]


def test_a_node_with_more_returns_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    run = _run(gpus_per_node=1, gpu_memory_gib=80, cpu_memory_gib=64)
    monkeypatch.setattr(hardware_check, "probe", lambda *_: NodeFacts("n0", 1, H100_GIB, 251.0))
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, mine: out.__setitem__(0, mine))
    notes = hardware_check.check(run, device=None, env={})
    assert notes == ["this node: CPU memory 251 GiB, the plan assumed 64 GiB (cpu_memory_gib)"]


def test_run_json_carries_the_profile_numbers_and_old_files_still_read(tmp_path: Path) -> None:
    old = _run()
    assert old.hardware == HardwareBlock()  # a run.json written before the block
    data = _run(gpus_per_node=2, gpu_memory_gib=80.0, cpu_memory_gib=251.0).to_dict()
    again = RunRecord.from_dict(json.loads(json.dumps(data)))
    assert again.hardware == HardwareBlock(2, 80.0, 251.0)


def test_server_mode_ranks_see_only_the_trainer_gpus() -> None:
    """The node task hides the vLLM server's GPUs from the trainers: they must see
    trainer_gpus, not the profile's count (a 4-GPU node, 1 serving, 3 training)."""
    base = {"schema": 1, "run_id": "r", "run_dir": "/x", "model": "m", "dataset": {"name": "d"},
            "nodes": 1, "procs_per_node": 3, "device": "cuda", "hardware": {"gpus_per_node": 4}}
    served = RunRecord.from_dict({**base, "vllm": {"enabled": True, "mode": "server", "server": {
        "node": 0, "gpus": [0], "trainer_gpus": [1, 2, 3]}}})
    assert gpus_needed(served) == 3
    assert gpus_needed(RunRecord.from_dict(base)) == 4
    assert compare(served.hardware, NodeFacts(gpus=3), gpus_needed(served)).ok


@pytest.mark.parametrize(("seen", "usable"), [
    ((251.0, None, ""), 251.0), ((251.0, 200.0, "cgroup memory.max"), 200.0),
    ((251.0, 300.0, "SLURM_MEM_PER_NODE"), 251.0), ((None, None, ""), None)])
def test_usable_host_memory_is_the_smaller_of_memtotal_and_the_job_limit(
        monkeypatch: pytest.MonkeyPatch, seen: tuple[float | None, float | None, str],
        usable: float | None) -> None:
    """What the GPU tests and bench_gpu.py write into the profiles they make from a machine."""
    monkeypatch.setattr(hardware_check, "host_memory", lambda env: seen)
    assert hardware_check.usable_host_gib({}) == usable
