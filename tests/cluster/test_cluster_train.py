"""GRPO training on the real sandbox cluster: ranks, TP groups and seeds, status. (ZeRO-3 on CPU
through the same path, its DeepSpeed files and their read-ahead on resume: tests/cluster/
test_cluster_async_save.py, whose runs are ZeRO-3.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.clusterlib import RECIPE, cli, finished, submit, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]

CHECKED = ("node", "rank", "local_rank", "tp_group", "tp_rank", "vllm_seed", "dp_shard")


def _table(rendered_summary: str) -> list[dict[str, int]]:
    """Parse the rank table `render` prints (after the script, on stderr)."""
    lines = [ln for ln in rendered_summary.splitlines() if ln and not ln.startswith("#")]
    header, rows = lines[0].split(), [ln.split() for ln in lines[1:]]
    names = {"local": "local_rank"}
    return [{names.get(h, h): int(v) for h, v in zip(header, row, strict=True)} for row in rows]


def _checked_rows(run_dir: Path) -> list[dict[str, int]]:
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    return [{k: r[k] for k in CHECKED} for r in ranks]


def test_two_nodes_train_and_status_follows(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    # steps of at least 0.5 s, so status (polled about every 1.5 s) sees training advance
    args = ["--site", "sandbox", "--nodes", "2", "--recipe", str(RECIPE), "--set", "max_steps=12",
            "--reward", "tests.slow.slow_reward:slow_length", "--run-id", "train-0001"]
    rendered = cli("render", "--output-root", str(root), *args)
    run_id, _, run_dir = submit(root, *args)

    steps_seen: list[int] = []
    def progress(row: dict) -> bool:
        if row["state"] == "RUNNING" and (not steps_seen or row["step"] != steps_seen[-1]):
            steps_seen.append(row["step"])
        return bool(row["finished"])

    row = wait_for(run_id, progress, timeout=300, every=1.0)
    assert row["state"] == "COMPLETED", row
    assert row["step"] == row["max_steps"] == 12
    assert row["checkpoint_step"] == 12
    assert len([s for s in steps_seen if 0 < s < 12]) >= 2, steps_seen  # seen advancing
    assert steps_seen == sorted(steps_seen)

    assert _checked_rows(run_dir) == _table(rendered.stderr)
    hosts = [r["hostname"] for r in json.loads((run_dir / "ranks.json").read_text())["ranks"]]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert json.loads((run_dir / "state.json").read_text())["phase"] == "done"
    table = cli("status", run_id).stdout
    assert "12/12" in table and "COMPLETED" in table


@pytest.mark.whole_cluster  # 3 nodes
def test_three_nodes_tp2_groups_and_seeds(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    args = ["--site", "sandbox", "--nodes", "3", "--procs-per-node", "2", "--tp", "2",
            "--recipe", str(RECIPE), "--set", "max_steps=2", "--run-id", "tp2-0001"]
    rendered = cli("render", "--output-root", str(root), *args)
    run_id, _, run_dir = submit(root, *args)
    row = wait_for(run_id, finished, timeout=300)
    assert row["state"] == "COMPLETED", row
    rows = _checked_rows(run_dir)
    assert rows == _table(rendered.stderr)
    assert [r["vllm_seed"] for r in rows] == [0, 0, 1, 1, 2, 2]
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    group_hosts = {g: {r["hostname"] for r in ranks if r["tp_group"] == g} for g in range(3)}
    assert all(len(h) == 1 for h in group_hosts.values())
    assert len(set().union(*group_hosts.values())) == 3
