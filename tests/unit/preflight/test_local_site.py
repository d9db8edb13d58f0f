"""A GPU workstation as a site (#58): nvidia-smi's answer read, a local profile written from
this machine, ``gpus_per_node: auto`` resolved before planning, and the warning lines for a
profile that uses fewer GPUs than the hardware has (this machine, or a Slurm partition's Gres)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.config.site import SiteProfile, find_site, load_site
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import local_site, machine
from hpc_grpo.preflight.machine import Gpu, Machine
from tests.unit.slurmfake import install

# Real answers of `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` (the
# query before memory.used was added: still read).
H200 = "NVIDIA H200, 143771\n"
H100X2 = "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n"
ONE_H200 = Machine((Gpu("NVIDIA H200", 143771),), cpus=16, memory_mib=131072)
NO_GPU = Machine((), cpus=2, memory_mib=24105, gpu_source="nvidia-smi not found")


@pytest.mark.parametrize(("text", "gpus"), [
    (H200, (Gpu("NVIDIA H200", 143771),)),
    (H100X2, (Gpu("NVIDIA H100 80GB HBM3", 81559), Gpu("NVIDIA H100 80GB HBM3", 81559, index=1))),
    # with memory.used (the query since #58's review): one card busy with another run
    ("NVIDIA H100 80GB HBM3, 81559, 72311\nNVIDIA H100 80GB HBM3, 81559, 4\n",
     (Gpu("NVIDIA H100 80GB HBM3", 81559, 72311), Gpu("NVIDIA H100 80GB HBM3", 81559, 4, 1))),
    ("Some, Card, 1024, 0\n", (Gpu("Some, Card", 1024, 0),)),
    ("NVIDIA A100-SXM4-80GB, 81920\r\n", (Gpu("NVIDIA A100-SXM4-80GB", 81920),)),
    ("Some, Card, 1024\n", (Gpu("Some, Card", 1024),)),  # a comma in the name
    ("NVIDIA GeForce RTX 4090, [N/A]\n", ()),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ()),
    ("", ()),
])
def test_nvidia_smi_answer_is_read(text: str, gpus: tuple[Gpu, ...]) -> None:
    assert machine.parse_nvidia_smi(text) == gpus


@pytest.mark.parametrize(("name", "kind"), [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA GeForce RTX 4090", "geforce_rtx_4090"),
])
def test_gpu_names_map_to_the_profile_types(name: str, kind: str) -> None:
    assert machine.gpu_type(name) == kind


def test_cuda_visible_devices_hides_gpus() -> None:
    four = tuple(Gpu("NVIDIA H100 80GB HBM3", 81559 + i) for i in range(4))
    assert machine.visible(four, None) == four
    assert machine.visible(four, "1,3") == (four[1], four[3])
    assert machine.visible(four, "") == ()
    assert machine.visible(four, "GPU-8d2f,GPU-1a2b") == four[:2]  # UUIDs: counted
    # as CUDA reads it (a review of #58's first version found -1 and 5,0 planned as 4 GPUs)
    assert machine.visible(four, "-1") == ()
    assert machine.visible(four, "0,-1,1") == (four[0],)
    assert machine.visible(four[:1], "5,0") == ()
    assert machine.visible(four, "2,2") == (four[2],)


def test_machine_line_says_where_the_figures_came_from() -> None:
    assert ONE_H200.gpus_line() == "1 x NVIDIA H200 143,771 MiB, from nvidia-smi"
    assert (ONE_H200.gpu_type, ONE_H200.gpu_memory_gib, ONE_H200.memory_gib) == \
        ("h200", 140.4, 128.0)
    assert NO_GPU.gpus_line() == "no GPU (nvidia-smi not found)"


# ---- gpus_per_node: auto ---------------------------------------------------------------------

def test_auto_without_gpus_is_todays_cpu_profile() -> None:
    shipped = find_site("local")
    assert shipped.gpus_auto and shipped.gpus_per_node == 0
    facts = local_site.resolve_local(shipped, NO_GPU)
    assert facts == local_site.SiteFacts(shipped)  # unchanged, no line, no warning
    assert (facts.site.device, facts.site.cpus_per_node, facts.site.default_procs_per_node) == \
        ("cpu", 2, 2)


def test_auto_with_an_h200_plans_for_it() -> None:
    facts = local_site.resolve_local(find_site("local"), ONE_H200)
    site = facts.site
    assert (site.gpus_per_node, site.gpu_type, site.gpu_memory_gib) == (1, "h200", 140.4)
    assert (site.cpus_per_node, site.cpu_memory_gib, site.procs_per_node, site.device) == \
        (16, 128.0, 1, "cuda")
    assert facts.source.startswith("this machine: 1 x NVIDIA H200 143,771 MiB, from nvidia-smi")
    assert facts.warnings == ()


@pytest.mark.parametrize("source", ["nvidia-smi failed: Failed to initialize NVML: Driver/library "
                                    "version mismatch", "nvidia-smi gave no answer within 10 s"])
def test_auto_where_nvidia_smi_fails_is_refused_not_guessed_as_cpu(source: str) -> None:
    """A review of #58's first version: a driver mismatch planned the CPU with one warning line,
    and the CPU plan then hid the GPUs from the ranks."""
    broken = dataclasses.replace(NO_GPU, gpu_source=source)
    with pytest.raises(UserError, match="reads this machine's GPUs, but nvidia-smi") as raised:
        local_site.resolve_local(find_site("local"), broken)
    assert "gpus_per_node: 0" in (raised.value.hint or "")
    hidden = dataclasses.replace(NO_GPU, gpu_source="from nvidia-smi, of 2: CUDA_VISIBLE_DEVICES=")
    facts = local_site.resolve_local(find_site("local"), hidden)  # the user hid them: the CPU
    assert facts.site.device == "cpu" and facts.warnings[0].startswith("site 'local' plans for")
    explicit = SiteProfile(name="box", scheduler="local", gpus_per_node=0)
    assert local_site.resolve_local(explicit, broken).site.device == "cpu"  # said 0: no probe


def test_an_explicit_zero_with_gpus_present_trains_on_cpu_and_says_how_to_use_them() -> None:
    site = SiteProfile(name="box", scheduler="local", gpus_per_node=0)
    facts = local_site.resolve_local(site, ONE_H200)
    assert facts.site == site
    (line,) = facts.warnings
    assert "trains on the CPU although this machine has 1 x NVIDIA H200" in line
    assert "gpus_per_node: auto" in line and "site init NAME --local" in line
    assert local_site.resolve_local(site, NO_GPU).warnings == ()


def test_a_slurm_profile_is_not_resolved_from_this_machine() -> None:
    site = SiteProfile(name="c", gpus_per_node=0)
    assert local_site.resolve_local(site, ONE_H200) == local_site.SiteFacts(site)


def test_auto_is_refused_on_a_slurm_site(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("scheduler: slurm\ngpus_per_node: auto\n")
    with pytest.raises(UserError, match="not the compute nodes'"):
        load_site(str(path), [])


# ---- Slurm: fewer GPUs per node than the partition's nodes have ------------------------------

@pytest.mark.parametrize(("declared", "gres", "warned"), [
    (4, ["gpu:h100:8(S:0-1)", "gpu:h100:4(S:0),gpu:h100:4(S:1)"], True),
    (0, ["gpu:8"], True),
    (8, ["gpu:h100:8(S:0-1)"], False),
    (4, ["gpu:h100:8", "gpu:h100:4"], False),  # the least node has what the profile uses
    (4, ["(null)", "gpu:h100:8"], False),
    (0, ["(null)"], False),
    (4, [], False),
])
def test_fewer_gpus_than_the_nodes_have(declared: int, gres: list[str], warned: bool) -> None:
    site = SiteProfile(name="c", partition="gpu", gpus_per_node=declared)
    line = local_site.fewer_gpus_line(site, gres)
    assert bool(line) == warned
    if warned:
        assert f"uses {declared} GPUs per node but every node of partition 'gpu' has 8" in line
        assert "set gpus_per_node: 8" in line


# ---- the local profile written from this machine --------------------------------------------

@pytest.mark.parametrize("found", [ONE_H200, NO_GPU], ids=["h200", "cpu"])
def test_local_profile_loads_with_the_machine_figures(tmp_path: Path, found: Machine) -> None:
    text = local_site.local_profile_lines(found, "test", python="/venv/bin/python")
    path = tmp_path / "ws.yaml"
    path.write_text(text)
    site = load_site(str(path), [])
    assert (site.scheduler, site.gpus_per_node, site.cpus_per_node) == \
        ("local", len(found.gpus), found.cpus)
    assert (site.gpu_memory_gib, site.cpu_memory_gib) == (found.gpu_memory_gib, found.memory_gib)
    assert site.default_procs_per_node == max(1, len(found.gpus))
    lines = {line.split(":")[0]: line for line in text.splitlines() if not line.startswith("#")}
    for key in ("gpus_per_node", "cpus_per_node", "cpu_memory_gib", "procs_per_node"):
        assert "  # " in lines[key], lines[key]  # each figure says where it came from
    if found.gpus:
        assert "143,771 MiB" in lines["gpu_memory_gib"] and "NVIDIA H200" in lines["gpu_type"]


def test_the_written_profile_is_what_auto_plans_with(tmp_path: Path) -> None:
    """One mapping of the probe onto a profile (local_site.machine_figures): ``site init --local``
    writes the figures ``gpus_per_node: auto`` resolves to, for the same machine (they were made
    in two places before, and a 0-CPU probe gave 1 in one and 0 in the other)."""
    for found in (ONE_H200, dataclasses.replace(ONE_H200, cpus=0),
                  Machine((Gpu("NVIDIA H100 80GB HBM3", 81559),) * 2, cpus=64, memory_mib=2**20)):
        path = tmp_path / "ws.yaml"
        path.write_text(local_site.local_profile_lines(found, "test", python="/venv/bin/python"))
        written = load_site(str(path), [])
        resolved = local_site.resolve_local(find_site("local"), found).site
        for key in local_site.machine_figures(found):
            assert getattr(written, key) == getattr(resolved, key), (key, found)


def test_a_card_another_process_holds_is_refused_naming_the_free_ones() -> None:
    """Two local runs on one workstation both planned every GPU (#58's known gap): a card with
    more than a tenth of its memory in use is a plan warning and a submit refusal, whose hint
    names the free cards for CUDA_VISIBLE_DEVICES, or says to wait where none is free."""
    two = Machine((Gpu("NVIDIA H100 80GB HBM3", 81559, 72311, 0),
                   Gpu("NVIDIA H100 80GB HBM3", 81559, 512, 1)), cpus=32, memory_mib=2**19)
    facts = local_site.resolve_local(find_site("local"), two)
    assert facts.site.gpus_per_node == 2 and len(facts.refused) == 1
    (refused,) = facts.refused
    assert "GPU 0 72,311 of 81,559 MiB" in refused.message and "GPU 1" not in refused.message
    assert refused.hint is not None and refused.hint.startswith("CUDA_VISIBLE_DEVICES=1 ")
    assert facts.warnings[0].endswith("(submit refuses this)")
    # the free card alone (CUDA_VISIBLE_DEVICES=1): nothing to refuse
    alone = Machine(machine.visible(two.gpus, "1"), cpus=32, memory_mib=2**19)
    assert local_site.resolve_local(find_site("local"), alone).refused == ()
    full = Machine((two.gpus[0],), cpus=32, memory_mib=2**19)
    (waiting,) = local_site.resolve_local(find_site("local"), full).refused
    assert waiting.hint is not None and waiting.hint.startswith("wait until they are free")
    old_query = Machine((Gpu("NVIDIA H200", 143771),), cpus=16, memory_mib=131072)  # no used
    assert local_site.resolve_local(find_site("local"), old_query).refused == ()


def test_submit_on_a_busy_card_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _fake_smi(tmp_path, monkeypatch, "NVIDIA H200, 143771, 120000\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(main, ["submit", "--site", "local", "--model", "builtin:tiny",
                                       "--output-root", str(runs), "--no-wait"])
    assert result.exit_code == 2, result.output
    assert "other processes hold memory on GPU 0 120,000 of 143,771 MiB" in result.output
    assert not runs.exists() or not any(runs.iterdir())


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str) -> Path:
    fake = install(tmp_path, monkeypatch, ("nvidia-smi",))
    fake.answer("nvidia-smi", answer)
    return fake.bin


def test_cli_site_init_local_then_plan_shows_the_gpu(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, H200)
    runner = CliRunner()
    done = runner.invoke(main, ["site", "init", "ws", "--local"])
    assert done.exit_code == 0, done.output
    path = Path(os.environ["HPC_GRPO_SITES"]) / "ws.yaml"
    assert f"wrote {path}: this machine, 1 GPUs h200 (140.4 GiB each)" in done.output
    site = load_site(str(path), [])
    assert (site.gpus_per_node, site.gpu_type, site.gpu_memory_gib, site.procs_per_node) == \
        (1, "h200", 140.4, 1)
    again = runner.invoke(main, ["site", "init", "ws", "--local"])
    assert again.exit_code == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert runner.invoke(main, ["site", "init", "ws", "--local", "--force"]).exit_code == 0
    plan = runner.invoke(main, ["plan", "--site", "ws", "--model", "Qwen/Qwen2.5-0.5B", "--json"])
    assert plan.exit_code == 0, plan.output
    data = json.loads(plan.stdout)
    assert (data["device"], data["procs_per_node"]) == ("cuda", 1)
    assert data["memory_plan"] is not None  # planned for a 140.4 GiB GPU


def test_cli_plan_on_the_shipped_local_site_reads_the_gpu(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, H200)
    out = CliRunner().invoke(main, ["plan", "--site", "local", "--model", "Qwen/Qwen2.5-0.5B"])
    assert out.exit_code == 0, out.output
    assert "this machine: 1 x NVIDIA H200 143,771 MiB, from nvidia-smi" in out.output
    assert "device cuda" in out.output


def test_site_init_without_slurm_writes_a_local_profile(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """No scontrol or sinfo on PATH: a workstation, profiled without --local."""
    fake_bin = _fake_smi(tmp_path, monkeypatch, H100X2)
    monkeypatch.setenv("PATH", str(fake_bin))
    out = tmp_path / "box.yaml"
    path, info = api.init_site("box", "", str(out), False)
    assert path == out and (info["scheduler"], info["gpus_per_node"], info["gpu_type"]) == \
        ("local", 2, "h100")
    with pytest.raises(UserError, match="--partition names a Slurm partition"):
        api.init_site("box2", "gpu", str(tmp_path / "box2.yaml"), False)


def test_an_explicit_zero_profile_warns_on_plan(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, H200)
    path = tmp_path / "cpuonly.yaml"
    path.write_text("scheduler: local\ngpus_per_node: 0\n")
    out = CliRunner().invoke(main, ["plan", "--site", str(path), "--model", "builtin:tiny"])
    assert out.exit_code == 0, out.output
    warned = [line for line in out.output.splitlines() if "trains on the CPU although" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ")


def test_plan_warns_when_sinfo_shows_more_gpus_than_the_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(tmp_path, monkeypatch, ("sinfo",))
    fake.answer("sinfo", "gpu001|gpu|gpu:h100:8(S:0-1)\ngpu002|gpu|gpu:h100:8(S:0-1)\n")
    path = tmp_path / "four.yaml"
    path.write_text("scheduler: slurm\npartition: gpu\ngpus_per_node: 4\ngpu_memory_gib: 80\n"
                    "cpus_per_node: 32\ncpu_memory_gib: 512\n")
    out = CliRunner().invoke(main, ["plan", "--site", str(path), "--model", "Qwen/Qwen2.5-0.5B"])
    assert out.exit_code == 0, out.output
    assert ("warning: site 'four' uses 4 GPUs per node but every node of partition 'gpu' has 8 "
            "h100 (sinfo's Gres)") in out.output
    assert fake.calls("sinfo")[0]["argv"][-1] == "--partition=gpu"
    fake.answer("sinfo", err="sinfo: error: Unable to contact slurm controller", rc=1)
    quiet = CliRunner().invoke(main, ["plan", "--site", str(path), "--model", "Qwen/Qwen2.5-0.5B"])
    assert quiet.exit_code == 0 and "sinfo's Gres" not in quiet.output


def test_mig_slices_are_refused_not_planned_as_whole_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MIG slice shows nvidia-smi's whole-card memory: planning with it would overcommit."""
    import subprocess

    answer = subprocess.CompletedProcess([], 0, "NVIDIA H100 80GB HBM3, 81559\n", "")
    monkeypatch.setattr(machine.subprocess, "run", lambda *a, **k: answer)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4a1c2b3d-aaaa-bbbb-cccc-0123456789ab")
    found = machine.probe()
    assert found.gpus == () and found.gpus_unknown, found
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES names MIG slices"):
        local_site.resolve_local(find_site("local"), found)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert len(machine.probe().gpus) == 1
