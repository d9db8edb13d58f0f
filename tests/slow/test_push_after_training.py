"""push_to_hub at the end of a real local run: the rank-0 node task exports the last checkpoint
(the real torch export child, checked) and pushes it, through `hpc-grpo export RUN --push`.

No hub is reachable here: the push goes to tests/unit/hubfake.py's ``UploadHub``, a loopback
stand-in of the hub's HTTP upload API, through ``HF_ENDPOINT`` with huggingface_hub's HTTP path
(``HF_HUB_DISABLE_XET=1``); the Xet transfer of the real hub is not covered.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted
from tests.paths import REPO
from tests.slow.runtime_slow_helpers import cli
from tests.unit.hubfake import UploadHub

TOKEN = "hf_standin_node_push_SECRET"


@pytest.mark.slow
def test_a_local_run_with_push_to_hub_exports_and_pushes_at_its_end(tmp_path: Path) -> None:
    with UploadHub(TOKEN) as hub:
        env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home"), "HF_ENDPOINT": hub.url,
               "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf"),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        job = ["--site", "local", "--model", "builtin:tiny", "--set", "max_steps=2",
               "--set", "push_to_hub=true", "--set", "hub_model_id=my-org/tiny-grpo",
               "--set", "hub_private_repo=true",
               "--output-root", str(tmp_path / "runs"), "--run-id", "push-0001"]
        proc = cli("submit", *job, env=env, timeout=900)  # an export and a push after the training
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "rank 0's node task exports the last checkpoint and pushes it to my-org/tiny-grpo" \
            in proc.stderr + proc.stdout
        run_dir = submitted(proc.stdout)[2]
        record = json.loads((run_dir / "run.json").read_text())
        assert record["hub"] == {"repo_id": "my-org/tiny-grpo", "private": True, "on_node": True}
        node_log = (run_dir / "logs" / "node-local.log").read_text()
        assert "[node] push_to_hub: done" in node_log, node_log[-3000:]
        export = json.loads((run_dir / "exports.jsonl").read_text().splitlines()[-1])
        folder = Path(export["path"])
        assert export["step"] == 2 and folder == run_dir / "export" / "step-2"
        local = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in folder.rglob("*") if p.is_file()}
        remote = {k: hashlib.sha256(v).hexdigest() for k, v in hub.repos["my-org/tiny-grpo"].items()}
        assert remote == local and "model.safetensors" in remote and "tokenizer.json" in remote
        assert hub.private["my-org/tiny-grpo"] == "private"
        assert hub.commits[-1]["summary"] == "hpc-grpo export of run push-0001, step 2"
        for path in run_dir.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path
        status = json.loads(cli("status", str(run_dir), "--json", env=env).stdout)
        row = status[0] if isinstance(status, list) else status
        assert row["pushed"].startswith("pushed step 2 to my-org/tiny-grpo (")
