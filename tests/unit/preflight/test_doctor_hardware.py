"""Doctor's "plan hardware" row (issue #29): the probe's GPUs, GPU memory and host memory
against the profile, through the comparison the ranks make, so doctor fails a node exactly
where a job would be refused before its model loads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.preflight import doctor
from hpc_grpo.preflight.capacity import Capacity
from hpc_grpo.preflight.hardware_row import hardware_row
from hpc_grpo.rundir.contract import HardwareBlock
from hpc_grpo.runtime import probe_gpus as probe
from tests.unit.preflight.doctor_helpers import report

GIB = 2**30
H100_SMI_GIB = 81559 / 1024  # nvidia-smi's memory.total of an "80 GB" H100: 79.6 GiB


def node(gpu_gib: float = H100_SMI_GIB, total_gib: float = 1790, **extra: Any) -> dict[str, Any]:
    return {**report("gpu1", 0), "gpu_memory": {"gib": gpu_gib, "source": "nvidia-smi"},
            "memory": {"total": int(total_gib * GIB), "available": None, "cgroup_limit": None},
            **extra}


def test_a_139_gib_profile_fails_on_h100s_with_both_numbers() -> None:
    check, status, detail = hardware_row(node(), HardwareBlock(8, 139, 1800))
    assert (check, status) == ("plan hardware", "fail")
    assert detail.startswith("GPU memory 79.6 GiB < planned 139 GiB (gpu_memory_gib): a job is "
                             "refused here"), detail


def test_the_profile_of_the_h100_nodes_passes_and_a_bigger_node_warns() -> None:
    assert hardware_row(node(), HardwareBlock(8, 80, 1800))[1] == "pass"
    status, detail = hardware_row(node(gpu_gib=139.8), HardwareBlock(8, 80, 1800))[1:]
    assert status == "warn" and "memory left unused" in detail


def test_slurm_memory_below_the_profile_fails() -> None:
    row = hardware_row(node(slurm_memory_gib=500.0), HardwareBlock(8, 80, 1800))
    assert row[1] == "fail" and "CPU memory 500 GiB (Slurm's memory for the job) < planned " \
        "1800 GiB (cpu_memory_gib)" in row[2], row


def test_doctor_reports_the_row_and_exits_1() -> None:
    expect = doctor.Expect(8, "ib0", capacity=Capacity(cpu_memory_gib=1800), gpu_memory_gib=139)
    rows = doctor.aggregate([node(), {**node(), "node": "gpu2", "node_id": 1}], expect)
    (row,) = [r for r in rows if r.check == "plan hardware"]
    assert (row.status, row.nodes) == ("fail", ("gpu1", "gpu2"))
    assert doctor.exit_code(rows) == 1


def test_the_probe_reads_the_visible_gpus_memory_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, 81559'\necho '1, 40960'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert probe.gpu_memory(1, {"CUDA_VISIBLE_DEVICES": "0"}) == {
        "gib": 79.65, "source": "nvidia-smi memory.total"}
    assert probe.gpu_memory(2, {})["gib"] == 40.0  # the smallest of them
    assert probe.gpu_memory(0, {}) is None  # a CPU profile asks nothing
