"""doctor and site init on the real sandbox Slurm cluster (4 namespace nodes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpc_grpo.config.site import load_site
from tests.cluster.clusterlib import NODES, cli
from tests.paths import SITE_CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
SANDBOX = SITE_CONFIGS / "sandbox.yaml"


def test_doctor_passes_on_two_nodes(tmp_path: Path) -> None:
    proc = cli("doctor", "--site", "sandbox", "--nodes", "2", "--output-root", str(tmp_path),
               "--json", timeout=150)
    data = json.loads(proc.stdout)
    assert data["exit_code"] == 0, proc.stdout
    names = [r["node"] for r in data["reports"]]
    assert len(names) == 2 and set(names) <= set(NODES)
    checks = {row["check"]: row for row in data["rows"]}
    assert checks["shared output"]["status"] == "pass"
    assert checks["rendezvous port"]["status"] == "pass" and "21" in checks["rendezvous port"]["detail"]
    assert checks["gpus"]["detail"].startswith("0 seen")
    # the sandbox's slurm.conf sets AuthInfo=cred_expire=10 (tests/cluster/slurm.conf.tmpl)
    assert checks["requeue hold"]["status"] == "pass", checks["requeue hold"]
    assert "waits 11 s" in checks["requeue hold"]["detail"]
    # the job's memory from Slurm's own settings: CR_Core (slurm.conf.tmpl) allocates none (#58)
    assert "Slurm does not allocate memory" in checks["node memory"]["detail"], checks["node memory"]
    assert not list(tmp_path.iterdir())  # the shared-directory token was removed


@pytest.mark.whole_cluster  # 4 nodes
def test_output_bandwidth_on_four_then_two_nodes_feeds_the_plan(tmp_path: Path) -> None:
    """#59: every rank of every node writes its share at once (fsync'd, removed); the figure
    per node is the slowest node's, cached per site, and the plan's save time reads the newest
    measurement (2 nodes after 4) as measured."""
    out = tmp_path / "out"
    out.mkdir()
    measured = {}
    for nodes in (4, 2):
        proc = cli("doctor", "--site", "sandbox", "--nodes", str(nodes), "--output-root",
                   str(out), "--output-bandwidth", "--json", timeout=240)
        data = json.loads(proc.stdout)
        assert data["exit_code"] == 0, proc.stdout
        write = data["output_write"]
        assert write["nodes"] == nodes and len(set(write["hosts"])) == nodes, write
        assert set(write["hosts"]) <= set(NODES) and not write["cut_short"], write
        per_node = write["per_node"]
        assert sorted(per_node) == sorted(write["hosts"]), write
        assert all(row["ranks"] == 2 and row["bytes"] == 2 * write["bytes_per_rank"]
                   for row in per_node.values()), per_node
        assert write["gbs_per_node"] == min(row["gbs"] for row in per_node.values()), write
        assert write["space"]["source"] == "df" and write["space"]["df_free_bytes"] > 0, write
        measured[nodes] = write
        assert not list(out.iterdir()), list(out.iterdir())  # every write removed
    plan = cli("plan", "--site", "sandbox", "--nodes", "2", "--model", "builtin:qwen2-0.5b",
               "--output-root", str(out), "--json")
    save = json.loads(plan.stdout)["save"]
    assert save["write_source"].startswith("measured"), save
    assert save["write_gbs_per_node"] == measured[2]["gbs_per_node"], (save, measured[2])
    assert "2 nodes x 2 ranks" in save["write_source"], save


def test_doctor_reports_missing_interface(tmp_path: Path) -> None:
    profile = tmp_path / "sandbox-ib9.yaml"
    profile.write_text(SANDBOX.read_text() + "network_interface: ib9\n")
    proc = cli("doctor", "--site", str(profile), "--nodes", "2", "--output-root", str(tmp_path),
               check=False, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.split()[:1] == ["interface"])
    assert "FAIL" in row and "ib9 missing" in row
    assert sum(node in row for node in NODES) == 2  # both nodes named
    assert "Traceback" not in proc.stderr


def test_site_init_then_render(tmp_path: Path) -> None:
    out = cli("site", "init", "sandbox-live").stdout
    path = Path(os.environ["HPC_GRPO_SITES"]) / "sandbox-live.yaml"
    assert str(path) in out
    site = load_site(str(path), [])
    assert (site.partition, site.cpus_per_node, site.gpus_per_node, site.max_time) == \
        ("debug", 4, 0, "02:00:00")
    script = cli("render", "--site", str(path), "--model", "builtin:tiny", "--nodes", "2",
                 "--output-root", str(tmp_path / "runs")).stdout
    assert "#SBATCH --nodes=2" in script and "#SBATCH --partition=debug" in script
    assert "#SBATCH --cpus-per-task=4" in script
