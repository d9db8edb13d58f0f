"""The links (#30): linkbench's arithmetic and layout, the per-site cache, which figure the plan
takes (declared > measured > assumed), doctor --bandwidth's srun argv and row against the shared
fake Slurm, and what plan and site init say."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.site import SiteProfile, load_site
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import bandwidth, links, siteinit
from hpc_grpo.rundir.contract import job_port
from hpc_grpo.runtime import linkbench
from hpc_grpo.runtime.probe_lines import report_lines
from tests.paths import REPO
from tests.unit.slurmfake import FakeSlurm

SANDBOX = REPO / "site_configs" / "sandbox.yaml"


def report(inter: float | None = 2.68, intra: float | None = 11.0, **extra: Any) -> dict[str, Any]:
    """A linkbench report as rank 0 prints it."""
    return {"kind": "links", "backend": "nccl", "device": "cuda", "nodes": 2, "procs_per_node": 4,
            "world_size": 8, "hosts": ["gpu1", "gpu2"], "job_id": "77",
            "inter": {"gbs": inter, "mib": 256, "by_size": {"256": inter}} if inter else None,
            "intra": {"gbs": intra, "mib": 256, "by_size": {"256": intra}} if intra else None,
            "measured_at": "2026-11-25T10:00:00+00:00", **extra}


def site(**keys: Any) -> SiteProfile:
    return SiteProfile(name="gpu", partition="gpu", gpus_per_node=4, **keys)


# ---- linkbench: arithmetic and layout, no torch ---------------------------------------------

def test_bus_bandwidth_is_the_issues_figure() -> None:
    """#30's sandbox figure: a 256 MB all-reduce in 0.100 s between 2 ranks is 2.68 GB/s."""
    assert linkbench.bus_gbs(256 * 2**20, 0.100, 2) == pytest.approx(2.684, abs=1e-3)
    assert linkbench.bus_gbs(2**30, 1.0, 8) == pytest.approx(2 * 7 / 8 * 2**30 / 1e9)
    assert linkbench.bus_gbs(2**20, 0.1, 1) == 0.0 and linkbench.bus_gbs(2**20, 0.0, 2) == 0.0


def test_groups_follow_each_ranks_host() -> None:
    leaders, nodes = linkbench.groups_of(["a", "a", "b", "b", "c", "c"])
    assert leaders == [0, 2, 4] and nodes == [[0, 1], [2, 3], [4, 5]]
    assert linkbench.groups_of(["a", "b"]) == ([0, 1], [[0], [1]])  # one rank per node


def test_layout_from_srun_and_from_torchrun() -> None:
    srun = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
            "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "1234"}
    where = linkbench.layout(srun, (21000, 21999))
    assert (where.rank, where.world, where.local_rank, where.master_addr) == (3, 4, 1, "gpu07")
    assert where.master_port == job_port(21000, 21999, 1234)  # the port a job of the site gets
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h",
                "MASTER_PORT": "2900"}
    assert linkbench.layout(torchrun) == linkbench.Layout(0, 2, 0, "h", 2900)
    with pytest.raises(SystemExit, match="neither torchrun"):
        linkbench.layout({})


def test_sizes_stop_before_the_time_bound() -> None:
    assert linkbench.next_fits(1.0, 0.01, 4, 7, 30)
    assert not linkbench.next_fits(20.0, 0.5, 4, 7, 30)  # 20 + 2 x 2 s x 7 > 30
    sizes = [{"mib": 4, "inter": 1.0, "intra": None}, {"mib": 16, "inter": 2.0, "intra": None}]
    assert linkbench.summary(sizes, "inter") == {"gbs": 2.0, "mib": 16,
                                                 "by_size": {"4": 1.0, "16": 2.0}}
    assert linkbench.summary(sizes, "intra") is None


# ---- the cache and the choice -----------------------------------------------------------------

def test_cache_round_trip_in_the_users_state_folder(hpc_home: Path) -> None:
    path = links.write_measurement("gpu", report())
    assert path == hpc_home / "links" / "gpu.json"
    record = json.loads(path.read_text())
    assert (record["version"], record["inter_node_gbs"], record["report"]["job_id"]) == (1, 2.68, "77")
    measured = links.read_measurement("gpu")
    assert measured is not None and measured.intra_node_gbs == 11.0
    assert measured.source == "measured by doctor on 2026-11-25 (nccl, 2 nodes x 4 processes)"


def test_a_report_without_a_figure_keeps_the_older_measurement(hpc_home: Path) -> None:
    links.write_measurement("gpu", report())
    assert links.write_measurement("gpu", {"kind": "links", "error": "RuntimeError: x"}) is None
    assert links.write_measurement("gpu", report(inter=None, intra=None)) is None
    assert links.read_measurement("gpu") is not None


@pytest.mark.parametrize("text", ["{not json", "[]", '{"version": 1}', '{"version": 9}'])
def test_a_damaged_cache_is_no_measurement(hpc_home: Path, text: str) -> None:
    path = links.cache_path("gpu")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert links.read_measurement("gpu") is None and links.site_links(site()) is None


def test_nothing_known_is_none_and_plan_says_assumed(hpc_home: Path) -> None:
    assert links.site_links(site()) is None
    line = links.links_line(site(), None)
    assert line.startswith("links: assumed") and "doctor --site gpu --bandwidth" in line
    local = SiteProfile(name="local", scheduler="local")
    assert "doctor measures Slurm sites only" in links.links_line(local, None)


def test_measured_figures_are_used_with_their_source(hpc_home: Path) -> None:
    links.write_measurement("gpu", report())
    facts = links.site_links(site())
    assert facts == links.LinkFacts(11.0, 2.68, "measured by doctor on 2026-11-25 (nccl, 2 nodes "
                                    "x 4 processes)", "2026-11-25T10:00:00+00:00")
    assert "between nodes 2.68 GB/s, inside a node 11 GB/s" in links.links_line(site(), facts)


def test_declared_figures_win_and_a_disagreement_is_noted(hpc_home: Path) -> None:
    links.write_measurement("gpu", report())
    facts = links.site_links(site(inter_node_gbs=25.0))
    assert facts is not None and (facts.inter_node_gbs, facts.intra_node_gbs) == (25.0, 11.0)
    assert facts.source.startswith("between nodes declared in the site profile; inside a node "
                                   "measured by doctor on 2026-11-25")
    assert facts.measured_at.startswith("2026-11-25")  # the intra figure is the measurement's
    assert "25 GB/s declared in the profile" in facts.note and "9.3x less" in facts.note
    agreeing = links.site_links(site(inter_node_gbs=3.0, intra_node_gbs=12.0))
    assert agreeing is not None and agreeing.note == "" and agreeing.measured_at == ""
    assert agreeing.source == links.DECLARED


def test_declared_alone_needs_no_measurement(hpc_home: Path) -> None:
    facts = links.site_links(site(inter_node_gbs=25))
    assert facts is not None and (facts.inter_node_gbs, facts.intra_node_gbs) == (25, None)
    assert "the unknown one is assumed" in links.links_line(site(), facts)


@pytest.mark.parametrize("value", ["-3", "0", ".nan", "1e6"])
def test_a_non_positive_figure_is_refused_with_a_hint(tmp_path: Path, value: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(SANDBOX.read_text() + f"inter_node_gbs: {value}\n")
    with pytest.raises(UserError) as err:
        load_site(str(path), [])
    assert "must be a positive number of GB/s" in err.value.message
    assert "doctor --site bad --bandwidth" in (err.value.hint or "")


def test_unknown_link_key_is_one_line_with_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(SANDBOX.read_text() + "inter_node_gb: 25\n")
    result = CliRunner().invoke(main, ["plan", "--site", str(path), "--model", "builtin:tiny"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "did you mean 'inter_node_gbs'" in lines[0], result.output


# ---- doctor --bandwidth against the shared fake Slurm ----------------------------------------

PROBED = [{"node": "node1", "versions": {"torch": "2.6.0"}},
          {"node": "node2", "versions": {"torch": "2.6.0"}}]


def _sandbox(**keys: Any) -> SiteProfile:
    base = load_site(str(SANDBOX), [])
    return base if not keys else \
        dataclasses.replace(base, **keys)


def test_bandwidth_job_argv_row_and_cache(fake: FakeSlurm, hpc_home: Path) -> None:
    measured = report(inter=1.2, intra=1.1, backend="gloo", device="cpu", procs_per_node=2,
                      hosts=["node1", "node2"])
    fake.answer("srun", "srun: job 9 queued\n" + "\n".join(report_lines(measured)) + "\n")
    row, got = bandwidth.measure(_sandbox(), PROBED, nodes=2, partition="", python="/py",
                                 timeout_s=60)
    argv = fake.calls("srun")[0]["argv"]
    command = argv[argv.index("/py"):]
    assert argv[:argv.index("/py")] == ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                                        "--job-name=hpc-grpo-links", "--time=2",
                                        "--kill-on-bad-exit=0", "--partition=debug"]
    assert command == ["/py", "-m", "hpc_grpo.runtime.linkbench", "--sizes-mib", "4,16,64",
                       "--max-seconds", "15", "--port-low", "21000", "--port-high", "21999",
                       "--device", "cpu"]
    assert row.status == "pass" and row.nodes == ("node1", "node2"), row
    assert "between nodes 1.2 GB/s (256 MiB), inside a node 1.1 GB/s" in row.detail
    assert str(hpc_home / "links" / "sandbox.json") in row.detail
    assert got == measured and links.read_measurement("sandbox") is not None


def test_bandwidth_row_warns_where_the_profile_disagrees(fake: FakeSlurm, hpc_home: Path) -> None:
    fake.answer("srun", "\n".join(report_lines(report(inter=1.2))) + "\n")
    row, _ = bandwidth.measure(_sandbox(inter_node_gbs=25.0), PROBED, nodes=2, partition="low",
                               python="/py", timeout_s=60)
    assert row.status == "warn" and "25 GB/s declared in the profile" in row.detail
    assert "--partition=low" in fake.calls("srun")[0]["argv"]


def test_bandwidth_failures_are_named(fake: FakeSlurm, hpc_home: Path) -> None:
    failed = {"kind": "links", "error": "DistNetworkError: connection refused"}
    fake.answer("srun", "\n".join(report_lines(failed)) + "\n", rc=1)
    row, _ = bandwidth.measure(_sandbox(), PROBED, nodes=2, partition="", python="/py",
                               timeout_s=60)
    assert row.status == "fail" and "all-reduce failed: DistNetworkError" in row.detail
    fake.answer("srun", "", err="srun: error: Unable to allocate resources: bad partition\n", rc=1)
    row, _ = bandwidth.measure(_sandbox(), PROBED, nodes=2, partition="", python="/py",
                               timeout_s=60)
    assert row.status == "fail" and "Unable to allocate resources" in row.detail
    assert links.read_measurement("sandbox") is None


@pytest.mark.parametrize(("nodes", "probed", "why"), [
    (1, PROBED, "one node x one process"), (2, [], "probe job did not run"),
    (2, [{"node": "node1", "versions": {"torch": None}}], "torch is not installed")])
def test_bandwidth_is_skipped_where_nothing_can_run(fake: FakeSlurm, nodes: int,
                                                    probed: list[dict[str, Any]], why: str) -> None:
    row, got = bandwidth.measure(_sandbox(procs_per_node=1), probed, nodes=nodes, partition="",
                                 python="/py", timeout_s=60)
    assert (row.status, got) == ("skip", None) and why in row.detail
    assert fake.calls("srun") == []


def test_gpu_sites_sweep_to_256_mib_on_their_interface() -> None:
    args = bandwidth.linkbench_args(site(network_interface="ib0"), 30)
    assert args[:2] == ["--sizes-mib", "4,16,64,256"] and args[-2:] == ["--interface", "ib0"]


# ---- plan and site init ---------------------------------------------------------------------

def _plan(*args: str) -> Any:
    return CliRunner().invoke(main, ["plan", "--site", "sandbox", "--model", "builtin:tiny",
                                     "--nodes", "2", *args], catch_exceptions=False)


def test_plan_shows_assumed_then_measured(hpc_home: Path) -> None:
    before = _plan()
    assert before.exit_code == 0 and "links: assumed" in before.output
    links.write_measurement("sandbox", report(inter=1.2, intra=1.1, backend="gloo"))
    after = _plan()
    assert "links: between nodes 1.2 GB/s, inside a node 1.1 GB/s" in after.output
    assert "measured by doctor on 2026-11-25 (gloo, 2 nodes x 4 processes)" in after.output
    block = json.loads(_plan("--json").output)["links"]
    assert block["facts"]["inter_node_gbs"] == 1.2 and block["note"] == ""


def test_site_init_lines_leave_the_keys_to_doctor() -> None:
    measured = links.measured_from(report())
    lines = siteinit.link_lines(measured)
    assert lines[0].startswith("inter_node_gbs: null  #") and "now 2.68, measured by doctor" in lines[0]
    assert all("assumed until `hpc-grpo doctor --bandwidth`" in line
               for line in siteinit.link_lines(None))


def test_the_measured_link_reaches_the_step_time_model(hpc_home: Path, tmp_path: Path) -> None:
    """doctor's figure is not only printed: the plan's predicted step and its choice use it
    (2 nodes of 2 GPUs, 1.5B; the sandbox link of 2026-11-23 was 2.68 GB/s)."""
    profile = tmp_path / "gpufarm.yaml"
    profile.write_text("partition: gpu\ngpus_per_node: 2\ngpu_memory_gib: 80\ngpu_type: H100\n"
                       "cpu_memory_gib: 250\n")

    def speed() -> dict[str, Any]:
        result = CliRunner().invoke(main, ["plan", "--site", str(profile), "--model",
                                           "builtin:qwen2-1.5b", "--nodes", "2", "--json"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return dict(json.loads(result.output)["speed"])

    assumed = speed()
    assert "25 GB/s between nodes (assumed)" in assumed["hardware"]
    links.write_measurement("gpufarm", report(inter=2.68, intra=150.0))
    measured = speed()
    assert "2.68 GB/s between nodes" in measured["hardware"]
    assert "measured by doctor on 2026-11-25" in measured["hardware"]
    exchange = "data-parallel exchange"
    assert measured["terms_s"][exchange] > 5 * assumed["terms_s"][exchange]
    assert measured["s_per_step"] > assumed["s_per_step"]


def test_a_gloo_measurement_is_not_a_gpu_sites_figure(hpc_home: Path) -> None:
    """A GPU node whose torch had no CUDA measures over Gloo's sockets: not NCCL's figure."""
    links.write_measurement("gpu", report(inter=1.2, intra=1.1, backend="gloo"))
    assert site().device == "cuda" and links.site_links(site()) is None
    cpu = dataclasses.replace(site(), gpus_per_node=0)
    facts = links.site_links(cpu)
    assert cpu.device == "cpu" and facts is not None and facts.inter_node_gbs == 1.2
