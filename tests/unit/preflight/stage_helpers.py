"""The tiny model files and fake hub of the stage tests (moved out of test_stage.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.hubfake import FakeHub, Repo, commit_of, read_folder

MODEL = "tiny-org/tiny-grpo"  # in no catalogue: the plan can only come from its config.json


DATASET = "tiny-org/tiny-math"


ROWS = b"".join(json.dumps({"prompt": f"What is {i} + {i}?", "solution": str(2 * i)}).encode()
                + b"\n" for i in range(8))


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Every file of the project's tiny model (weights, config, tokenizer), by repository path."""
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    return read_folder(build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0))


def _profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "lab",
             **keys: str) -> Path:
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    cache = tmp_path / "shared" / "hf"
    body = {"scheduler": "slurm", "partition": "batch", "gpus_per_node": "4",
            "gpu_memory_gib": "80", "cpus_per_node": "32", "cpu_memory_gib": "256",
            "max_nodes": "8", "output_root": str(tmp_path / "runs"),
            "hf_home": str(cache), "nodes_online": "false", **keys}
    (sites / f"{name}.yaml").write_text(
        "".join(f"{k}: {v}\n" for k, v in body.items() if v != "UNSET"))
    monkeypatch.setenv("HPC_GRPO_SITES", str(sites))
    return cache


def _hub(tiny_files: dict[str, bytes]) -> FakeHub:
    v2 = {**tiny_files, "config.json": tiny_files["config.json"] + b"\n"}  # another commit
    main_commit, v2_commit = commit_of(tiny_files), commit_of(v2, "v2")
    return FakeHub({
        ("model", MODEL): Repo(tiny_files, {"main": main_commit}),
        ("model", "tiny-org/tagged"): Repo(v2, {"main": main_commit, "v2": v2_commit}),
        ("dataset", DATASET): Repo({"data/train.jsonl": ROWS, "README.md": b"# tiny math\n"},
                                   {"main": commit_of({"d": ROWS})}),
    })
