"""site init without a cluster: scontrol text in, a profile the strict loader accepts out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.site import load_site
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import siteinit

GPU_NODES = """\
NodeName=gpu001 Arch=x86_64 CoresPerSocket=48
   CPUAlloc=96 CPUEfctv=192 CPUTot=192 CPULoad=41.07
   AvailableFeatures=h100,ib
   ActiveFeatures=h100,ib
   Gres=gpu:h100:8(S:0-1)
   GresUsed=gpu:h100:8(IDX:0-7)
   NodeAddr=gpu001 NodeHostName=gpu001 Version=23.11.6
   OS=Linux 5.14.0-427.22.1.el9_4.x86_64 #1 SMP PREEMPT_DYNAMIC Mon Jun 10 09:23:36 EDT 2024
   RealMemory=2000000 AllocMem=1000000 FreeMem=1612345 Sockets=2 Boards=1
   State=MIXED ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,gpu-preempt
   BootTime=2024-06-20T08:11:02 SlurmdStartTime=2024-06-20T08:12:40
   LastBusyTime=2024-06-21T10:00:00 ResumeAfterTime=None
   CfgTRES=cpu=192,mem=2000000M,billing=192,gres/gpu=8,gres/gpu:h100=8
   AllocTRES=cpu=96,mem=1000000M,gres/gpu=8,gres/gpu:h100=8
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

NodeName=gpu002 Arch=x86_64 CoresPerSocket=48
   CPUAlloc=0 CPUEfctv=192 CPUTot=192 CPULoad=0.01
   Gres=gpu:h100:4(S:0),gpu:h100:4(S:1)
   RealMemory=2000000 AllocMem=0 FreeMem=1900000 Sockets=2 Boards=1
   State=DRAINED ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,gpu-preempt
   Reason=Kill task failed [root@2024-06-21T09:00:00]

NodeName=cpu001 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.00
   Gres=(null)
   RealMemory=256000 AllocMem=0 FreeMem=250000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=cpu
"""

PARTITIONS = """\
PartitionName=gpu
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=NO QoS=N/A
   DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=16 MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=gpu[001-002]
   PriorityJobFactor=1 PriorityTier=10 RootOnly=NO ReqResv=NO OverSubscribe=EXCLUSIVE
   OverTimeLimit=NONE PreemptMode=OFF
   State=UP TotalCPUs=384 TotalNodes=2 SelectTypeParameters=NONE
   TRES=cpu=384,mem=4000000M,node=2,billing=384,gres/gpu=16

PartitionName=gpu-preempt
   Default=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=gpu[001-002]
   PreemptMode=REQUEUE State=UP TotalCPUs=384 TotalNodes=2

PartitionName=cpu
   Default=YES MaxNodes=UNLIMITED MaxTime=1-12:00:00 Nodes=cpu001
   PreemptMode=OFF State=UP TotalCPUs=64 TotalNodes=1
"""

# What the sandbox's Slurm 22.05 prints with --oneliner.
SANDBOX_NODE = ("NodeName=node1 Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 "
                "CPULoad=1.05 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) "
                "NodeAddr=10.200.0.11 NodeHostName=node1 Version=22.05.8 OS=Linux 6.1 #1 SMP "
                "PREEMPT_DYNAMIC @0  RealMemory=4000 AllocMem=0 FreeMem=22142 Sockets=1 Boards=1 "
                "State=IDLE ThreadsPerCore=1 Partitions=debug,low,high  CfgTRES=cpu=4,mem=4000M "
                "AllocTRES= CapWatts=n/a\n")


def test_parse_records_keeps_values_with_spaces() -> None:
    records = siteinit.parse_records(GPU_NODES)
    assert [r["NodeName"] for r in records] == ["gpu001", "gpu002", "cpu001"]
    first = records[0]
    assert first["OS"].startswith("Linux 5.14.0") and first["OS"].endswith("EDT 2024")
    assert first["Gres"] == "gpu:h100:8(S:0-1)" and first["CfgTRES"].startswith("cpu=192,mem=")
    assert records[1]["Reason"] == "Kill task failed [root@2024-06-21T09:00:00]"
    one = siteinit.parse_records(SANDBOX_NODE)
    assert len(one) == 1 and one[0]["AllocTRES"] == "" and one[0]["RealMemory"] == "4000"


@pytest.mark.parametrize(("gres", "count", "kind"), [
    ("gpu:h100:8(S:0-1)", 8, "h100"),
    ("gpu:h100:4(S:0),gpu:h100:4(S:1)", 8, "h100"),
    ("gpu:4", 4, ""),
    ("gpu:a100:4,nvme:1", 4, "a100"),
    ("gpu:nvidia_h100_80gb_hbm3:8(S:0-1),shard:nvidia_h100_80gb_hbm3:32", 8, "nvidia_h100_80gb_hbm3"),
    ("gpu:a100:2,gpu:v100:6", 6, "v100"),
    ("(null)", 0, ""),
    ("", 0, ""),
])
def test_parse_gres(gres: str, count: int, kind: str) -> None:
    assert siteinit.parse_gres(gres) == (count, kind)


@pytest.mark.parametrize(("kind", "gib"), [
    ("h100", 80), ("nvidia_h100_80gb_hbm3", 80), ("tesla_v100-sxm2-32gb", 32), ("a100", 40),
    ("a10g", 24), ("l40s", 48), ("mystery", 0),
    # NVML-autodetected names with the size between underscores (issue #29: was 40, the A100's
    # smaller model, for an 80 GB card); a size inside a word is not one
    ("nvidia_a100_80gb_pcie", 80), ("nvidia_h100_nvl_94gb", 94), ("a100_hbm2e80gbx", 40),
])
def test_gpu_memory_guess(kind: str, gib: float) -> None:
    assert siteinit.gpu_memory_gib(kind) == gib


def test_nodes_and_partitions() -> None:
    nodes = siteinit.nodes_from(GPU_NODES)
    assert nodes[0] == siteinit.Node("gpu001", 192, 2000000, 8, "h100", ("gpu", "gpu-preempt"))
    assert nodes[1].gpus == 8 and nodes[2].gpus == 0
    parts = siteinit.partitions_from(PARTITIONS)
    assert [(p.name, p.default, p.max_time, p.max_nodes, p.total_nodes) for p in parts] == [
        ("gpu", False, "2-00:00:00", 16, 2), ("gpu-preempt", False, "", 0, 2),
        ("cpu", True, "1-12:00:00", 0, 1)]
    assert siteinit.choose_partition(parts).name == "cpu"
    assert siteinit.choose_partition(parts, "gpu").name == "gpu"
    with pytest.raises(UserError, match="no partition 'gpux'") as err:
        siteinit.choose_partition(parts, "gpux")
    assert "did you mean 'gpu'" in err.value.hint


def write_profile(tmp_path: Path, partition: str) -> Path:
    parts = siteinit.partitions_from(PARTITIONS)
    text = siteinit.profile_lines(siteinit.choose_partition(parts, partition),
                                  siteinit.nodes_from(GPU_NODES), parts, "test")
    path = tmp_path / f"{partition}.yaml"
    path.write_text(text)
    return path


def test_gpu_profile_loads_strictly(tmp_path: Path) -> None:
    site = load_site(str(write_profile(tmp_path, "gpu")), [])
    assert (site.partition, site.gpus_per_node, site.gpu_type, site.gpu_memory_gib) == \
        ("gpu", 8, "h100", 80.0)
    assert (site.cpus_per_node, site.cpu_memory_gib, site.max_time, site.max_nodes) == \
        (192, 1953.1, "2-00:00:00", 16)
    assert site.preempt_partition == "gpu-preempt"
    # written explicitly, not left to a default: offline nodes until the user says otherwise
    assert (site.nodes_online, site.nodes_offline, site.hf_home) == (False, True, "")


def test_cpu_profile_loads_strictly(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "cpu")
    site = load_site(str(path), [])
    assert (site.gpus_per_node, site.cpus_per_node, site.max_time) == (0, 64, "1-12:00:00")
    assert "ask Slurm at submit" in path.read_text()


@pytest.fixture
def fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "node.txt").write_text(GPU_NODES)
    (tmp_path / "partition.txt").write_text(PARTITIONS)
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\ncat "{tmp_path}/$2.txt"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_cli_site_init_writes_once(tmp_path: Path, fake_scontrol: None) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["site", "init", "mycluster", "--partition", "gpu"])
    assert result.exit_code == 0, result.output
    path = Path(os.environ["HPC_GRPO_SITES"]) / "mycluster.yaml"
    assert str(path) in result.output and "8 GPUs per node" in result.output
    again = runner.invoke(main, ["site", "init", "mycluster"])
    assert again.exit_code == 2 and "already exists" in again.stderr and "--force" in again.stderr
    forced = runner.invoke(main, ["site", "init", "mycluster", "--force"])
    assert forced.exit_code == 0 and "partition cpu" in forced.output
    sites = runner.invoke(main, ["sites"])
    assert "mycluster" in sites.output


def test_cli_site_init_output_and_bad_input(tmp_path: Path, fake_scontrol: None) -> None:
    runner = CliRunner()
    out = tmp_path / "elsewhere" / "x.yaml"
    result = runner.invoke(main, ["site", "init", "x", "--output", str(out)])
    assert result.exit_code == 0 and load_site(str(out), []).partition == "cpu"
    for args, words in ((["site", "init", "../evil"], "not a usable profile name"),
                        (["site", "init", "y", "--partition", "nope"], "no partition 'nope'")):
        bad = runner.invoke(main, args)
        assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
        assert words in bad.stderr


# A cluster set up unlike the sandbox: `scavenger` is preemptible with 60 s of grace.
BATCH_CLUSTER = """\
PartitionName=batch
   Default=YES MaxNodes=UNLIMITED MaxTime=2-00:00:00 Nodes=cn[1-4] GraceTime=0
   PreemptMode=OFF State=UP TotalCPUs=128 TotalNodes=4
PartitionName=scavenger
   Default=NO MaxNodes=UNLIMITED MaxTime=1-00:00:00 Nodes=cn[1-4] GraceTime=60
   PreemptMode=REQUEUE State=UP TotalCPUs=128 TotalNodes=4
PartitionName=urgent
   Default=NO MaxNodes=2 MaxTime=04:00:00 Nodes=cn[1-4] GraceTime=0
   PreemptMode=OFF State=UP TotalCPUs=128 TotalNodes=4
""" + "".join(f"""NodeName=cn{i} CPUEfctv=32 CPUTot=32 Gres=(null) RealMemory=128000 State=IDLE
   Partitions=batch,scavenger,urgent
""" for i in range(1, 5))


def _init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, partition: str) -> str:
    from tests.unit.slurmfake import install

    install(tmp_path, monkeypatch, ("scontrol",)).answer("scontrol", text)
    path = siteinit.init_site("cn", partition=partition, output=str(tmp_path / f"{partition}.yaml"))
    return path.read_text()


@pytest.mark.parametrize("partition", ["batch", "scavenger"])
def test_requeue_settings_written_with_the_lead_below_grace_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partition: str) -> None:
    text = _init(tmp_path, monkeypatch, BATCH_CLUSTER, partition)
    site = load_site(str(tmp_path / f"{partition}.yaml"), [])
    assert (site.requeue_signal, site.max_requeues, site.port_range) == ("USR2", 3, (20000, 29999))
    assert site.signal_lead_s == 45 and site.partition == partition
    assert site.preempt_partition == ("scavenger" if partition == "batch" else "")
    settings = {line.split(":")[0]: line for line in text.splitlines()}
    for key in ("requeue_signal", "signal_lead_s", "max_requeues", "port_range",
                "watchdog_startup_s", "watchdog_min_s"):
        assert "  # " in settings[key], settings[key]  # each with a comment saying why
    assert (site.watchdog_startup_s, site.watchdog_min_s) == (1800, 300)
    assert "below GraceTime=60s of preemptible partition 'scavenger'" in settings["signal_lead_s"]


@pytest.mark.parametrize(("grace", "lead", "why"), [
    ("0", 120, "GraceTime=0: a preempted job is killed at once"),
    ("600", 120, "below GraceTime=600s"),
    ("20", 15, "below GraceTime=20s"),
    ("1", 1, "below GraceTime=1s"),  # a quarter below 1 s was 0, a lead no profile may have
])
def test_lead_follows_grace_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grace: str,
                                 lead: int, why: str) -> None:
    text = _init(tmp_path, monkeypatch, BATCH_CLUSTER.replace("GraceTime=60", f"GraceTime={grace}"),
                 "urgent")
    assert load_site(str(tmp_path / "urgent.yaml"), []).signal_lead_s == lead
    assert why in text


def test_every_profile_key_is_written_with_what_it_is_for(tmp_path: Path) -> None:
    """#27: site init left out python and procs_per_node, which a user then had to look up. Every
    key of SiteProfile is in the written profile (container as a commented example), so a key
    added to the profile without a line here fails this test."""
    import dataclasses

    from hpc_grpo.config.site import SiteProfile

    parts = siteinit.partitions_from(PARTITIONS)
    text = siteinit.profile_lines(siteinit.choose_partition(parts, "gpu"),
                                  siteinit.nodes_from(GPU_NODES), parts, "test",
                                  python="/shared/venv/bin/python")
    written = {line.lstrip("# ").split(":", 1)[0] for line in text.splitlines() if ":" in line}
    # gpus_auto is `gpus_per_node: auto`, a local site's only (this machine's GPUs): a Slurm
    # profile gives the nodes' count, which is written
    keys = {f.name for f in dataclasses.fields(SiteProfile)} - {"name", "gpus_auto"}
    assert keys - written == set()
    path = tmp_path / "gpu.yaml"
    path.write_text(text)
    site = load_site(str(path), [])
    assert (site.python, site.procs_per_node, site.run_dir_mode) == ("/shared/venv/bin/python", 0,
                                                                     "0700")
