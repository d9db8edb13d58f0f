"""Doctor's disk and memory rows (#15): a node's probed free output space and memory against a
planned checkpoint and the profile; the probe's own readers on this machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpc_grpo.config.site import SiteProfile, find_site
from hpc_grpo.preflight import doctor
from hpc_grpo.preflight.capacity import Capacity, capacity_rows
from hpc_grpo.preflight.hardware_row import hardware_row
from hpc_grpo.rundir.contract import HardwareBlock
from hpc_grpo.runtime import probe
from hpc_grpo.scheduler.jobscript import JobMemory, job_memory

GIB = 2**30
SEVEN_B = Capacity(cpu_memory_gib=126, checkpoint_bytes=int(74.3 * GIB), checkpoints_at_once=2,
                   save_host_gib=4.7)


def _report(free_gib: float, total_gib: float, limit_gib: float | None = None) -> dict:
    return {"disk": {"free": int(free_gib * GIB), "path": "/scratch/runs"},
            "memory": {"total": int(total_gib * GIB), "available": int(total_gib * GIB),
                       "cgroup_limit": int(limit_gib * GIB) if limit_gib else None}}


def test_a_7b_checkpoint_against_an_h200_machines_disk() -> None:
    rows = dict((c, (s, d)) for c, s, d in capacity_rows(_report(50.7, 125.8), SEVEN_B))
    assert rows["output disk"][0] == "fail" and "74.3 GiB" in rows["output disk"][1]
    assert rows["node memory"][0] == "pass"
    rows = dict((c, (s, d)) for c, s, d in capacity_rows(_report(100, 125.8), SEVEN_B))
    assert rows["output disk"][0] == "warn"  # one fits, not two at once
    assert capacity_rows(_report(200, 125.8), SEVEN_B)[0][1] == "pass"


def test_memory_below_the_profile_or_the_save_is_flagged() -> None:
    limited = capacity_rows(_report(500, 256, limit_gib=64), Capacity(cpu_memory_gib=128))
    assert limited[1][1] == "warn" and "cgroup limit" in limited[1][2] and "128" in limited[1][2]
    save = Capacity(cpu_memory_gib=128, checkpoint_bytes=GIB, checkpoints_at_once=2,
                    save_host_gib=140)
    assert capacity_rows(_report(500, 128), save)[1][1] == "fail"


def test_the_jobs_memory_is_what_slurm_gives_it() -> None:
    """#27: the node had 24 GiB, Slurm gave the job 3.9 (--mem): doctor reported 24."""
    rows = capacity_rows({**_report(500, 24), "slurm_memory_gib": 3.9}, Capacity(cpu_memory_gib=24))
    assert rows[1][1] == "warn" and rows[1][2].startswith("3.9 GiB for the job (Slurm's memory")
    assert "24" in rows[1][2]  # the profile's number, which host-memory plans use
    assert capacity_rows({**_report(500, 24), "slurm_memory_gib": None}, Capacity())[1][2] == \
        "24.0 GiB for the job"


def test_facts_alone_without_a_model_and_a_probe_error() -> None:
    rows = capacity_rows(_report(10, 64), Capacity())
    assert [r[1] for r in rows] == ["pass", "pass"] and "--model" in rows[0][2]
    broken = capacity_rows({"disk": {"ok": False, "detail": "probe error: PermissionError"}},
                           Capacity())
    assert broken == [("output disk", "fail", "probe error: PermissionError")]
    assert capacity_rows({}, Capacity()) == []  # an older probe: no rows


def test_rows_reach_the_doctor_table_in_order() -> None:
    report = {"node": "n1", "hosts": ["n1"], "job_id": 3, "versions": {}, **_report(50, 125)}
    rows = doctor.aggregate([report], doctor.Expect(0, "", capacity=SEVEN_B))
    checks = [r.check for r in rows]
    assert checks.index("output disk") < checks.index("node memory") < checks.index("gpus")
    assert doctor.exit_code(rows) == 1


def test_the_probe_reads_this_machines_disk_and_memory(tmp_path: Path) -> None:
    disk = probe.disk(str(tmp_path / "not" / "yet"))
    assert disk["free"] > 0 and disk["path"] == str(tmp_path)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       131072 kB\nMemAvailable:    65536 kB\nHugePages_Total: 0\n")
    seen = probe.memory(meminfo)
    assert (seen["total"], seen["available"]) == (131072 * 1024, 65536 * 1024)
    assert probe.memory()["total"] > 2**30


PARTITION = ("PartitionName=debug AllowGroups=ALL Default=YES DefMemPerCPU=1000 MaxMemPerNode=UNLIMITED "
             "Nodes=node[1-4] TotalNodes=4\n\n"
             "PartitionName=big Default=NO DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n")
CONFIG = ("Configuration data as of 2026-12-03T10:00:00\nAuthInfo                = cred_expire=10\n"
          "DefMemPerNode           = UNLIMITED\nSelectTypeParameters    = CR_CORE_MEMORY\n")


def _site(cpus: int = 4) -> SiteProfile:
    return dataclasses.replace(find_site("sandbox"), cpus_per_node=cpus, partition="debug")


@pytest.mark.parametrize(("partition", "config", "mib", "why"), [
    ({"DefMemPerCPU": "1000"}, {"SelectTypeParameters": "CR_CORE_MEMORY"}, 4000,
     "DefMemPerCPU 1000 MiB x 4 CPUs of partition debug"),
    ({"DefMemPerNode": "UNLIMITED"}, {"SelectTypeParameters": "CR_CPU_MEMORY",
                                      "DefMemPerNode": "2048"}, 2048,
     "DefMemPerNode 2048 MiB of the cluster's"),
    ({"DefMemPerCPU": "1000"}, {"SelectTypeParameters": "CR_Core"}, None,
     "SelectTypeParameters=CR_Core: Slurm does not allocate memory"),
    ({}, {"SelectTypeParameters": "CR_Core_Memory", "DefMemPerCPU": "0"}, None,
     "no DefMemPerNode, DefMemPerGPU or DefMemPerCPU: the node's memory"),
])
def test_the_memory_slurm_gives_the_training_job(partition: dict[str, str], config: dict[str, str],
                                                 mib: int | None, why: str) -> None:
    assert job_memory(_site(), "debug", partition, config) == JobMemory(mib, why)


def test_a_gpu_partitions_default_per_gpu_is_the_jobs_memory() -> None:
    """A review of #58's first version: DefMemPerGPU (a GPU partition's JobDefaults, the usual
    setting there) was read as no limit, and doctor passed on the node's RealMemory."""
    gpu_site = dataclasses.replace(_site(16), gpus_per_node=4)
    partition = {"JobDefaults": "DefCpuPerGPU=4,DefMemPerGPU=65536", "DefMemPerNode": "UNLIMITED"}
    assert job_memory(gpu_site, "gpu", partition, {"SelectTypeParameters": "CR_Core_Memory"}) == \
        JobMemory(262144, "DefMemPerGPU 65536 MiB x 4 GPUs of partition gpu")
    cluster = {"SelectTypeParameters": "CR_Core_Memory", "DefMemPerGPU": "8000"}
    assert job_memory(gpu_site, "gpu", {}, cluster).mib == 32000
    assert job_memory(_site(), "debug", partition, cluster).mib is None  # a CPU job: no GPUs


def test_the_node_memory_row_is_the_jobs_allowance_not_the_nodes() -> None:
    """#58: doctor said PASS 23.5 GiB, the node's RealMemory, where DefMemPerCPU gave the job
    3.9 GiB; the probe's own allocation (one CPU, 1000 MiB) is not the job's either."""
    job = job_memory(_site(), "debug", {"DefMemPerCPU": "1000"},
                     {"SelectTypeParameters": "CR_CORE_MEMORY"})
    report = {**_report(500, 23.5, limit_gib=0.98), "slurm_memory_gib": 0.98, "gpus": {"count": 0}}
    (_, (_, status, text)) = capacity_rows(report, Capacity(cpu_memory_gib=23.5), job)
    shown = ("3.9 GiB for the job (DefMemPerCPU 1000 MiB x 4 CPUs of partition debug) of the "
             "node's 23.5 GiB")
    assert status == "warn" and text.startswith(f"{shown}, the profile says 23.5")
    need = Capacity(cpu_memory_gib=3.5, save_host_gib=6.0)
    assert capacity_rows(report, need, job)[1][1:] == (
        "fail", f"{shown}; saving a checkpoint needs 6 GiB: the OOM killer would end it")
    ok = capacity_rows(report, Capacity(cpu_memory_gib=3.9, save_host_gib=2.0), job)[1]
    assert ok[1] == "pass" and ok[2].endswith("23.5 GiB; the plan needs 2.0 GiB")
    free = JobMemory(None, "SelectTypeParameters=CR_Core: Slurm does not allocate memory")
    assert capacity_rows(report, Capacity(), free)[1][2] == f"23.5 GiB for the job ({free.why})"
    _, status, detail = hardware_row(report, HardwareBlock(0, 0.0, 23.5), job)
    assert status == "fail" and "DefMemPerCPU" in detail


def test_doctor_reads_the_partitions_and_the_clusters_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.slurm, "scontrol_show", lambda entity: PARTITION)
    assert doctor._job_memory(_site(), "debug", CONFIG) == JobMemory(
        4000, "DefMemPerCPU 1000 MiB x 4 CPUs of partition debug")
    assert doctor._job_memory(_site(), "", CONFIG) is not None  # the default partition's
    assert doctor._job_memory(_site(), "big", CONFIG) == JobMemory(
        None, "no DefMemPerNode, DefMemPerGPU or DefMemPerCPU: the node's memory")
    assert doctor._job_memory(_site(), "debug", None) is None  # the controller did not answer
