"""doctor --bandwidth on the real sandbox cluster (#30): Gloo over the namespace nodes' veth
links, the figures cached per site and shown by plan; then a profile of another name and
partition, one process per node, where only the figure between nodes can be measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cluster.clusterlib import NODES, cli
from tests.paths import SITE_CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
SANDBOX = SITE_CONFIGS / "sandbox.yaml"


def _bandwidth(site: str, root: Path) -> tuple[dict, dict]:
    proc = cli("doctor", "--site", site, "--nodes", "2", "--output-root", str(root), "--bandwidth",
               "--json", "--timeout", "90", check=False, timeout=150)
    data = json.loads(proc.stdout)
    row = next(r for r in data["rows"] if r["check"] == "bandwidth")
    assert row["status"] == "pass", (row, proc.stderr[-2000:])
    return row, data["links"]


def _plan(site: str) -> str:
    return cli("plan", "--site", site, "--model", "builtin:tiny", "--nodes", "2").stdout


def test_doctor_measures_the_links_and_plan_shows_them(tmp_path: Path) -> None:
    assert "links: assumed" in _plan("sandbox")
    row, links = _bandwidth("sandbox", tmp_path)
    assert (links["backend"], links["nodes"], links["procs_per_node"]) == ("gloo", 2, 2)
    assert set(links["hosts"]) <= set(NODES) and len(links["hosts"]) == 2
    inter, intra = links["inter"]["gbs"], links["intra"]["gbs"]
    print(f"sandbox links: between nodes {inter} GB/s, inside a node {intra} GB/s "
          f"({links['inter']['mib']} MiB, {links['elapsed_s']} s)")
    assert 0.01 < inter < 100 and 0.01 < intra < 100  # sockets over veth on shared cores
    assert links["elapsed_s"] < 30
    cache = Path(os.environ["HPC_GRPO_HOME"]) / "links" / "sandbox.json"
    assert json.loads(cache.read_text())["inter_node_gbs"] == inter and str(cache) in row["detail"]
    shown = _plan("sandbox")
    assert f"links: between nodes {inter:.3g} GB/s, inside a node {intra:.3g} GB/s" in shown
    assert "measured by doctor on" in shown and "(gloo, 2 nodes x 2 processes)" in shown


def test_another_partition_one_process_per_node(tmp_path: Path) -> None:
    profile = tmp_path / "lowlinks.yaml"
    profile.write_text(SANDBOX.read_text().replace("partition: debug", "partition: low")
                       .replace("procs_per_node: 2", "procs_per_node: 1"))
    _, links = _bandwidth(str(profile), tmp_path / "runs")
    assert links["procs_per_node"] == 1 and links["intra"] is None and links["inter"]["gbs"] > 0
    assert (Path(os.environ["HPC_GRPO_HOME"]) / "links" / "lowlinks.json").is_file()
    shown = _plan(str(profile))
    assert "inside a node unknown" in shown and "the unknown one is assumed" in shown
    assert "(gloo, 2 nodes)" in shown
