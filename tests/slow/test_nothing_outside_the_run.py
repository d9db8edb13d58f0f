"""Issue #27: a run leaves nothing outside its folders, and trains in the precision the plan
states. A short local run (2 ranks, 2 steps, a JSONL dataset, so that datasets, torchelastic,
W&B's import and matplotlib all write) under a fake HOME and TMPDIR: both are as empty afterwards
as before. Before the fix the same run left /tmp/torchelastic_*, four wandb-media/-artifacts
folders and torchinductor_root, and under ~/.cache the datasets cache and matplotlib's font
list. With open-r1's ``torch_dtype: bfloat16`` the checkpoint's weights are float32, as the
plan says for a CPU site (before: bf16 weights and Adam moments)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted


def _dtypes(safetensors: Path) -> set[str]:
    """The tensor dtypes a safetensors file holds, from its JSON header."""
    with safetensors.open("rb") as handle:
        size = struct.unpack("<Q", handle.read(8))[0]
        header = json.loads(handle.read(size))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.slow
def test_a_local_run_leaves_nothing_in_tmp_or_the_home_cache(tmp_path: Path) -> None:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(f'{{"prompt": "Say {w}:"}}\n' for w in ("hi", "cat", "red", "one")))
    before = (_listing(tmp), _listing(home))
    cli = str(Path(sys.executable).with_name("hpc-grpo"))
    proc = subprocess.run(
        [cli, "submit", "--site", "local", "--model", "builtin:tiny", "--dataset", str(data),
         "--set", "max_steps=2", "--set", "per_device_train_batch_size=4", "--set",
         "num_generations=4", "--set", "max_completion_length=8", "--set", "save_steps=2",
         "--set", "torch_dtype=bfloat16",
         "--output-root", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "HOME": str(home), "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = submitted(proc.stdout)[2]
    assert (run_dir / "summary.json").exists()
    assert (_listing(tmp), _listing(home)) == before
    assert (run_dir.parent / ".datasets-cache").is_dir()  # the output root's, instead
    assert _dtypes(run_dir / "checkpoints" / "checkpoint-2" / "model.safetensors") == {"F32"}
