"""The stage command as a user meets it (#14): submit refuses a hub name the offline nodes
cannot load and prints the stage commands; those commands, run as printed in a child process
against a loopback hub, fix it, and the run records the pinned commits. A slow test: the child
processes import huggingface_hub and the planner (tests/unit/preflight/test_stage.py holds the rest)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.preflight import stage
from tests.paths import REPO
from tests.unit.preflight.stage_helpers import DATASET, MODEL, _hub, _profile
from tests.unit.preflight.stage_helpers import tiny_files as tiny_files  # noqa: F401 (a fixture)
from tests.unit.slurmfake import FakeSlurm


def test_submit_refuses_what_is_not_staged_with_the_command_that_stages_it(
        tiny_files: dict[str, bytes], fake: FakeSlurm, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _profile(tmp_path, monkeypatch)
    args = ["--site", "lab", "--model", MODEL, "--dataset", DATASET, "--nodes", "2",
            "--set", "max_prompt_length=64", "--set", "max_completion_length=64"]
    out = CliRunner().invoke(main, ["submit", *args])
    assert out.exit_code == 2, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 2 and all("have no internet" in line for line in lines)
    assert f"run `hpc-grpo stage {MODEL} --site lab` on the login node" in lines[0]
    assert f"run `hpc-grpo stage {DATASET} --site lab --dataset` on the login node" in lines[1]
    assert fake.calls("sbatch") == [] and not (tmp_path / "runs").exists()
    render = CliRunner().invoke(main, ["render", *args])  # shows, submits nothing: warns
    assert render.exit_code == 0 and "submit will refuse it" in render.output

    # The printed commands, run as printed (against the loopback hub), fix it.
    with _hub(tiny_files) as hub:
        for line in lines:
            command = shlex.split(line.split("`")[1])
            assert command[:2] == ["hpc-grpo", "stage"]
            env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
            env.pop("HF_HUB_OFFLINE", None)
            proc = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", *command[1:]], env=env,
                                  capture_output=True, text=True, cwd=REPO, timeout=120)
            assert proc.returncode == 0, proc.stderr
    out = CliRunner().invoke(main, ["submit", *args])
    assert out.exit_code == 0, out.output
    run = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    model = stage.find_staged(str(cache), "model", MODEL, "")
    data = stage.find_staged(str(cache), "dataset", DATASET, "")
    assert model and data
    assert run["model"] == MODEL and run["model_load"]["commit"] == model.commit
    assert (run["model_load"]["hf_home"], run["model_load"]["offline"]) == (str(cache), True)
    assert run["dataset"]["commit"] == data.commit
    # the tiny model is in no catalogue: its memory plan comes from the staged config.json
    config = json.loads(tiny_files["config.json"])
    assert run["memory_plan"] is not None and config["max_position_embeddings"] == 512
    assert run["vllm"]["max_model_length"] == 128
    # and what the plan could not know before staging it: the model's 512-token context (its
    # staged config.json), which 512-token prompts and TRL's 256-token completions overrun
    long = CliRunner().invoke(main, ["submit", *args[:-4], "--set", "max_prompt_length=512"])
    assert long.exit_code == 2, long.output
    assert "prompt 512 + completion 256 = 768 tokens, above the model's context of 512" \
        in long.output
    # with no prompt bound set, the login node reads the staged dataset with the staged model's
    # tokenizer (preflight/inputs.py) and the plan sizes vLLM for the longest prompt it measured
    measured = CliRunner().invoke(main, ["submit", *args[:-4]])
    assert measured.exit_code == 0, measured.output
    runs = sorted((tmp_path / "runs").glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    bound = json.loads(runs[-1].read_text())["dataset"]["max_prompt_length"]
    assert 0 < bound < 64, bound
