"""After training (#28), on a real CPU run of this machine: export and eval end to end.

One run of the tiny model (1 node x 2 processes, ZeRO off, length reward, checkpoints at steps
3 and 6): eval of the first and the last checkpoint gives mean rewards that moved the way
training moved them; the export writes a complete, checked folder that status shows.
A second run trains with DeepSpeed ZeRO-3 and exports from its shards alone (a full-parameter
ZeRO-3 checkpoint holds no model file). An export that fails or is stopped half-way leaving
nothing is tests/unit/export/test_export_write.py's (a stand-in child: no torch, under 1 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.slow.runtime_slow_helpers import run_node, write_run

pytestmark = pytest.mark.slow
STEPS, SAVE = 6, 3


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpc_grpo.cli", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model"), seed=0)


def trained(root: Path, model: Path, name: str, grpo: dict[str, Any] | None = None,
            **over: Any) -> Path:
    run_dir = root / name
    run = write_run(run_dir, model, steps=STEPS, **over)
    run["grpo_config"].update(save_steps=SAVE, max_completion_length=24, **(grpo or {}))
    (run_dir / "run.json").write_text(json.dumps(run, indent=2))
    proc = run_node(run_dir, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir


def mean_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout))


def test_eval_moves_with_training_and_export_is_complete(tmp_path: Path, model: Path) -> None:
    run = trained(tmp_path, model, "main")
    first = mean_of(cli("eval", str(run), "--step", str(SAVE), "--limit", "32", "--json"))
    last = mean_of(cli("eval", str(run), "--step", str(STEPS), "--limit", "32", "--json"))
    # measured: step 3 -29.9 +- 2.2, step 6 -23.7 +- 1.7 (32 prompts): the length reward climbs
    assert last["mean"] > first["mean"], (first, last)
    assert Path(last["path"]).parent == run / "eval" and last["label"] == f"step-{STEPS}"

    done = cli("export", str(run))
    assert done.returncode == 0, done.stderr
    target = run / "export" / f"step-{STEPS}"
    assert done.stdout.strip() == f"exported {target}"
    assert ("check: transformers (CPU): |log p(export) - log p(checkpoint's weights as written)| "
            "max 0, mean 0 over") in done.stderr, done.stderr
    assert "check: vLLM did not read the folder: vLLM is not installed here" in done.stderr
    files = sorted(p.name for p in target.iterdir())
    assert files == ["README.md", "chat_template.jinja", "config.json", "generation_config.json",
                     "model.safetensors", "reward_curve.png", "tokenizer.json",
                     "tokenizer_config.json"]
    config = json.loads((target / "config.json").read_text())
    assert config["use_cache"] is True and config["dtype"] == "float32"
    assert f"# main, step {STEPS}" in (target / "README.md").read_text()

    again = cli("export", str(run))
    assert again.returncode == 2 and "already exists and is not empty" in again.stderr
    rows = json.loads(cli("status", str(run), "--json").stdout)
    assert rows[0]["exported"].startswith(f"exported step {STEPS} (full, float32), checked")
    assert rows[0]["evaluated"].startswith(f"eval of step-{STEPS} on builtin:digits")


def test_deepspeed_zero3_exports_from_its_shards_alone(tmp_path: Path, model: Path) -> None:
    import torch
    from safetensors.torch import load_file

    run = trained(tmp_path, model, "zero3", deepspeed={
        "zero_stage": 3, "offload_optimizer": False, "overlap_comm": True,
        "contiguous_gradients": True})
    checkpoint = run / "checkpoints" / f"checkpoint-{STEPS}"
    # A full-parameter ZeRO-3 checkpoint is DeepSpeed's files alone: no gathered model file
    # (runtime/rank/setup/grpo_args.py), written once (deepspeed_save.py); the export reads the fp32
    # master weights through zero_to_fp32. The reference is DeepSpeed's own script, which it
    # copies into every checkpoint, run as a user would.
    assert (checkpoint / "latest").exists() and not (checkpoint / "model.safetensors").exists()
    assert "ZeRO-3 checkpoints hold DeepSpeed's files alone, written once" in (
        run / "logs" / "rank-0.log").read_text()
    reference = tmp_path / "zero_to_fp32"
    script = subprocess.run([sys.executable, str(checkpoint / "zero_to_fp32.py"), str(checkpoint),
                             str(reference)],  # pickled: safetensors refuses the tied embedding
                            capture_output=True, text=True, timeout=300)
    assert script.returncode == 0, script.stderr
    gathered = torch.load(reference / "pytorch_model.bin", weights_only=True)
    # eval reads the shards the same way, through transformers (vLLM loads folders only)
    shards = mean_of(cli("eval", str(run), "--step", str(STEPS), "--limit", "8", "--json"))
    record = json.loads(Path(shards["path"]).read_text())
    assert record["subject"]["layout"] == "zero" and record["engine"] == "transformers", record
    assert "DeepSpeed's shards only" in record["engine_note"] and record["prompts"] == 8, record
    done = cli("export", str(run), "--dtype", "bf16")
    assert done.returncode == 0, done.stderr
    assert "(zero layout, weights, bfloat16)" in done.stderr, done.stderr
    held = re.search(r"transformers \(CPU\): .* max ([0-9.e+-]+), mean", done.stderr)
    assert held and float(held.group(1)) <= 1e-4, done.stderr  # the shards' weights, rounded
    assert "rounding to bfloat16 alone moves log p by max" in done.stderr, done.stderr
    exported = load_file(str(run / "export" / f"step-{STEPS}" / "model.safetensors"))
    assert set(exported) <= set(gathered) and exported
    for name, tensor in exported.items():  # DeepSpeed's fp32 file, rounded as the export was
        assert tensor.equal(gathered[name].bfloat16()), name
