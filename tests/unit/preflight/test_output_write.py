"""The output file system's write bandwidth (#59): writebench's ranks writing at once (threads
on this host as the ranks), its quota parsers, the per-site-and-root cache, which figure the
plan takes (declared > measured > assumed), and doctor --output-bandwidth's srun argv and row
against the shared fake Slurm."""

from __future__ import annotations

import argparse
import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.site import SiteProfile, load_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.errors import UserError
from hpc_grpo.planner import lookup_model
from hpc_grpo.planner.job import build_plan
from hpc_grpo.planner.types import ModelRef, WriteFigure
from hpc_grpo.preflight import output_write, siteinit, write_job
from hpc_grpo.runtime import writebench
from hpc_grpo.runtime.probe_lines import report_lines
from tests.paths import REPO
from tests.unit.slurmfake import FakeSlurm

SANDBOX = REPO / "site_configs" / "sandbox.yaml"
PROBED = [{"node": "node1"}, {"node": "node2"}]


def report(gbs: float = 3.2, **extra: Any) -> dict[str, Any]:
    """A writebench report as rank 0 prints it."""
    return {"kind": "output_write", "gbs_per_node": gbs, "total_gbs": 2 * gbs, "nodes": 2,
            "procs_per_node": 2, "bytes_per_rank": 2**30, "hosts": ["node1", "node2"],
            "per_node": {"node1": {"gbs": gbs}, "node2": {"gbs": gbs + 1}}, "cut_short": False,
            "space": {"fs_type": "lustre", "df_free_bytes": 5 * 2**40, "source": "lfs quota",
                      "quota": {"used_bytes": 2**40, "limit_bytes": 3 * 2**40,
                                "free_bytes": 2 * 2**40}},
            "measured_at": "2026-11-30T10:00:00+00:00", **extra}


def _sandbox(**keys: Any) -> SiteProfile:
    base = load_site(str(SANDBOX), [])
    return dataclasses.replace(base, **keys) if keys else base


# ---- writebench on this host: two ranks as threads ------------------------------------------

def test_every_rank_writes_its_share_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    args = argparse.Namespace(dir=str(tmp_path), token="t1", bytes_per_rank=3 * 2**20 + 5,
                              max_seconds=30.0)
    out: dict[int, Any] = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(r, writebench.bench(args, r, 2)))
               for r in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    got = out[0]
    assert out[1] is None and got["kind"] == "output_write"
    assert got["bytes"] == 2 * (3 * 2**20 + 5) and got["nodes"] == 1 and got["procs_per_node"] == 2
    assert got["gbs_per_node"] > 0 and got["total_gbs"] == pytest.approx(got["gbs_per_node"], rel=0.01)
    assert got["space"]["df_free_bytes"] > 0 and got["space"]["source"] == "df"
    assert list(tmp_path.iterdir()) == []  # the files and the folder removed


def test_a_rank_that_never_comes_is_named(tmp_path: Path) -> None:
    args = argparse.Namespace(dir=str(tmp_path), token="t2", bytes_per_rank=1024, max_seconds=0.3)
    with pytest.raises(RuntimeError, match="is the output root shared"):
        writebench.bench(args, 0, 2)


def test_per_node_is_one_hosts_clock_and_total_the_slowest_nodes_time() -> None:
    records = [{"host": "a", "bytes": 4e9, "start": 100.0, "end": 102.0},
               {"host": "a", "bytes": 4e9, "start": 100.5, "end": 104.0},
               {"host": "b", "bytes": 4e9, "start": 900.0, "end": 901.0}]  # another clock
    got = writebench.summarize(records)
    assert got["per_node"]["a"]["gbs"] == 2.0 and got["per_node"]["b"]["gbs"] == 4.0
    assert got["gbs_per_node"] == 2.0 and got["total_gbs"] == 3.0  # 12 GB over node a's 4 s


def test_quota_parsers_and_the_mount_of_a_path() -> None:
    lfs = "      /lustre  1048576*  0  4194304  -  12  0  0  -\n"
    assert writebench.parse_quota(lfs, "lfs quota") == {"used_bytes": 2**30,
                                                       "limit_bytes": 4 * 2**30}
    mm = ("                         Block Limits                      |\n"
          "Filesystem type   KB  quota  limit  in_doubt  grace |  files\n"
          "gpfs0      USR    2048  0  8192  0  none | 3 0 0 0 none\n")
    assert writebench.parse_quota(mm, "mmlsquota") == {"used_bytes": 2 * 2**20,
                                                       "limit_bytes": 8 * 2**20}
    assert writebench.parse_quota("/lustre 10 0 0 - 1 0 0 -", "lfs quota") is None  # no limit
    mounts = "/dev/sda1 / ext4 rw 0 0\n10.0.0.1@o2ib:/scratch /lustre lustre rw 0 0\n"
    assert writebench.mount_of(Path("/lustre/u/runs"), mounts)[1:] == ("/lustre", "lustre")
    assert writebench.mount_of(Path("/lustrex"), mounts)[2] == "ext4"


def test_space_asks_the_file_systems_own_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writebench.shutil, "which", lambda name: f"/usr/bin/{name}")
    asked: list[list[str]] = []

    def run(argv: list[str]) -> str:
        asked.append(argv)
        return "  /x  1024  0  4096  -  1 0 0 -\n"

    got = writebench.space(tmp_path, f"srv:/x {tmp_path} lustre rw 0 0\n", run)
    assert asked[0][:4] == ["lfs", "quota", "-q", "-u"] and got["source"] == "lfs quota"
    assert got["quota"]["free_bytes"] == 3 * 2**20


# ---- the cache and the plan's figure ----------------------------------------------------------

def test_cache_is_per_site_and_root(hpc_home: Path, tmp_path: Path) -> None:
    scratch, project = str(tmp_path / "scratch"), str(tmp_path / "project")
    path = output_write.write_measurement("sandbox", scratch, report(3.2))
    assert path == hpc_home / "output_write" / "sandbox.json"
    output_write.write_measurement("sandbox", project, report(0.8))
    assert output_write.read_measurement("sandbox", scratch).gbs_per_node == 3.2  # type: ignore[union-attr]
    assert output_write.read_measurement("sandbox", project).gbs_per_node == 0.8  # type: ignore[union-attr]
    assert output_write.read_measurement("other", scratch) is None
    assert output_write.write_measurement("sandbox", scratch, {"error": "x"}) is None
    figure = output_write.site_write(_sandbox(), scratch)
    assert figure is not None and (figure.gbs_per_node, figure.kind) == (3.2, "measured")
    assert "measured by doctor on 2026-11-30 (2 nodes x 2 ranks writing 1 GiB each" in figure.source
    declared = output_write.site_write(_sandbox(output_write_gbs=9.0), scratch)
    assert declared == output_write.WriteFigure(9.0, output_write.DECLARED, "declared")
    assert output_write.site_write(_sandbox(), str(tmp_path / "elsewhere")) is None


@pytest.mark.parametrize("text", ["", "{", '{"version": 1, "roots": []}', '{"version": 0}'])
def test_a_damaged_cache_is_no_measurement(hpc_home: Path, text: str) -> None:
    path = output_write.cache_path("sandbox")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert output_write.read_measurement("sandbox", "/x") is None


@pytest.mark.parametrize(("key", "value"), [("output_write_gbs", "0"), ("output_write_gbs", "-2"),
                                            ("grace_time_s", "-1"), ("grace_time_s", "70000")])
def test_bad_profile_figures_are_refused_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text(f"partition: p\n{key}: {value}\n")
    with pytest.raises(UserError) as err:
        load_site(str(profile), [])
    assert key in (err.value.field or "")


def test_plan_says_assumed_then_measured_then_declared(hpc_home: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    argv = ["plan", "--site", "sandbox", "--model", "Qwen2.5-0.5B", "--nodes", "2",
            "--output-root", str(root)]
    before = CliRunner().invoke(main, argv, catch_exceptions=False).output
    assert "save: " in before and "assumed, neither declared nor measured" in before
    output_write.write_measurement("sandbox", str(root), report(3.2))
    after = CliRunner().invoke(main, argv, catch_exceptions=False).output
    assert "at 3.2 GB/s a node (measured by doctor on 2026-11-30" in after


def test_run_json_records_the_predicted_save_and_its_source_in_one_word() -> None:
    """run.json's predicted save (#59, what `status RUN` sets each save beside) is the plan's,
    and its source word is the figure's kind (WriteFigure.kind, set where it is found):
    assumed, declared, measured."""
    site, model = _sandbox(), "Qwen/Qwen2.5-0.5B"
    spec = build_spec({"model_name_or_path": model, "nodes": 2}, {}, {}, site)
    measured = output_write.measured_from(report(3.2))
    assert measured is not None
    for write, word in ((None, "assumed"), (WriteFigure(5.0, output_write.DECLARED, "declared"), "declared"),
                        (WriteFigure(3.2, measured.source, "measured"), "measured")):
        plan = build_plan(site, spec, ModelRef(model, local=False, arch=lookup_model(model)),
                          write=write)
        record = plan.run_record("r", "/runs/r")
        assert plan.save is not None and record.predicted_save_s == plan.save.seconds > 0
        assert (record.save_write_gbs, record.save_write_source) == (plan.save.gbs, word)


# ---- doctor --output-bandwidth against the shared fake Slurm --------------------------------

def test_write_job_argv_row_and_cache(fake: FakeSlurm, hpc_home: Path, tmp_path: Path) -> None:
    fake.answer("srun", "srun: job 9 queued\n" + "\n".join(report_lines(report())) + "\n")
    root = str(tmp_path / "runs")
    row, got = write_job.measure(_sandbox(), PROBED, nodes=2, partition="", python="/py",
                                 timeout_s=60, root=root, bytes_per_rank=5 * 2**30)
    argv = fake.calls("srun")[0]["argv"]
    assert argv[:argv.index("/py")][:4] == ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                                            "--job-name=hpc-grpo-write"]
    command = argv[argv.index("/py"):]
    assert command[:5] == ["/py", "-m", "hpc_grpo.runtime.writebench", "--dir", root]
    assert command[command.index("--bytes-per-rank") + 1] == str(5 * 2**30)
    assert row.status == "pass" and row.nodes == ("node1", "node2")
    assert "3.2 GB/s a node (the slowest of 2), 6.4 GB/s in total" in row.detail
    assert "quota 3.0 GiB" not in row.detail and "quota 3072.0 GiB, 2048.0 GiB left (lfs quota)" in row.detail
    assert got == report() and output_write.read_measurement("sandbox", root) is not None


def test_write_job_failures_and_skips(fake: FakeSlurm, hpc_home: Path, tmp_path: Path) -> None:
    failed = {"kind": "output_write", "error": "RuntimeError: only some ranks appeared"}
    fake.answer("srun", "\n".join(report_lines(failed)) + "\n", rc=1)
    row, _ = write_job.measure(_sandbox(), PROBED, nodes=2, partition="", python="/py",
                               timeout_s=60, root=str(tmp_path))
    assert row.status == "fail" and "only some ranks appeared" in row.detail
    row, got = write_job.measure(_sandbox(), [], nodes=2, partition="", python="/py",
                                 timeout_s=60, root=str(tmp_path))
    assert (row.status, got) == ("skip", None) and len(fake.calls("srun")) == 1


def test_site_init_writes_the_gracetime_it_read() -> None:
    part = siteinit.Partition("scavenger", False, "", 0, 4, "REQUEUE", 60)
    lines = siteinit.requeue_lines(part)
    assert any(line.startswith("grace_time_s: 60  # GraceTime of 'scavenger'") for line in lines)
    assert any(line.startswith("# grace_time_s: 60") for line in siteinit.requeue_lines(None))
