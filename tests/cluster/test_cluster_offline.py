"""A hub model and dataset staged on the login node train on 2 sandbox nodes with the hub off (#14).

The site profile is the sandbox's with a cache and ``nodes_online: false``. ``hpc-grpo stage``
downloads "tiny-org/tiny-grpo" (the project's tiny model) and a math dataset from a loopback hub
server (the nodes' network namespaces cannot reach it: only the login side can), and the ranks
load the pinned snapshots with HF_HUB_OFFLINE=1. The job is an open-r1 style recipe
(model_name_or_path, dataset_name, dataset_prompt_column, reward_funcs: [accuracy, format]), so
math-verify's accuracy and the format reward are logged every step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.cluster.clusterlib import cli, submit, wait_for
from tests.paths import SITE_CONFIGS
from tests.unit.hubfake import FakeHub, Repo, commit_of, read_folder

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
SANDBOX = SITE_CONFIGS / "sandbox.yaml"
MODEL, DATASET = "tiny-org/tiny-grpo", "tiny-org/tiny-math"
OPEN_R1_RECIPE = {  # keys as open-r1's grpo.py / `trl grpo --config` read them
    "model_name_or_path": MODEL, "dataset_name": DATASET, "dataset_prompt_column": "problem",
    "solution_column": "solution", "reward_funcs": ["accuracy", "format"],
    "output_dir": "data/tiny-grpo-math", "max_steps": 2, "max_prompt_length": 32, "save_steps": 2,
    "learning_rate": 0.01, "per_device_train_batch_size": 4, "num_generations": 4,
    "max_completion_length": 24, "report_to": "none", "seed": 42}


def test_staged_hub_model_trains_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    profile = yaml.safe_load(SANDBOX.read_text())
    profile.update(hf_home=str(tmp_path / "hf"), nodes_online=False)
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "offline-sandbox.yaml").write_text(yaml.safe_dump(profile))
    monkeypatch.setenv("HPC_GRPO_SITES", str(sites))
    recipe = tmp_path / "math-open-r1.yaml"
    recipe.write_text(yaml.safe_dump(OPEN_R1_RECIPE, sort_keys=False))
    args = ["--site", "offline-sandbox", "--nodes", "2", "--recipe", str(recipe)]
    refused = cli("submit", "--output-root", str(tmp_path / "runs"), *args, check=False)
    assert refused.returncode == 2 and "hpc-grpo stage tiny-org/tiny-grpo --site offline-sandbox" \
        in refused.stderr and not (tmp_path / "runs").exists()

    files = read_folder(build_tiny_model(tmp_path / "src", seed=0))
    rows = "".join(json.dumps({"problem": f"What is {i} + {i}?", "solution": f"${2 * i}$"}) + "\n"
                   for i in range(16)).encode()
    with FakeHub({("model", MODEL): Repo(files, {"main": commit_of(files)}),
                  ("dataset", DATASET): Repo({"train.jsonl": rows}, {"main": commit_of({"": rows})})
                  }) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        staged = cli("stage", MODEL, "--site", "offline-sandbox").stdout
        cli("stage", DATASET, "--dataset", "--site", "offline-sandbox")
    monkeypatch.delenv("HF_ENDPOINT")
    commit = commit_of(files)
    assert f"commit {commit}" in staged

    run_id, _, run_dir = submit(tmp_path / "runs", *args)
    row = wait_for(run_id, lambda r: bool(r["finished"]), timeout=180)
    assert row["state"] == "COMPLETED" and row["step"] == 2, row
    run = json.loads((run_dir / "run.json").read_text())
    assert run["model"] == MODEL
    assert {k: run["model_load"][k] for k in ("commit", "hf_home", "offline")} == {
        "commit": commit, "hf_home": str(tmp_path / "hf"), "offline": True}
    snapshot = tmp_path / "hf" / "hub" / "models--tiny-org--tiny-grpo" / "snapshots" / commit
    for rank in range(4):  # two nodes x two ranks, each read the pinned snapshot offline
        log = (run_dir / "logs" / f"rank-{rank}.log").read_text()
        assert f"[train] model {snapshot}; dataset " in log
        assert "datasets--tiny-org--tiny-math/snapshots/" in log
        assert "HF_HUB_OFFLINE 1" in log
    hosts = {r["hostname"] for r in json.loads((run_dir / "ranks.json").read_text())["ranks"]}
    assert len(hosts) == 2
    assert os.path.exists(run_dir / "checkpoints" / "checkpoint-2")
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:  # math-verify against the staged solution column, and the format reward
        assert 0.0 <= m["rewards/accuracy/mean"] <= 1.0 and 0.0 <= m["rewards/format/mean"] <= 1.0
