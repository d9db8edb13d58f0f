"""Issue #27: a run leaves nothing outside its folders, and trains in the precision the plan
states. A short local run (2 ranks, 2 steps, a JSONL dataset, so that datasets, torchelastic,
W&B's import and matplotlib all write) under a fake HOME and TMPDIR: both are as empty afterwards
as before. Before the fix the same run left /tmp/torchelastic_*, four wandb-media/-artifacts
folders and torchinductor_root, and under ~/.cache the datasets cache and matplotlib's font
list. With open-r1's ``torch_dtype: bfloat16`` the checkpoint's weights are float32, as the
plan says for a CPU site (before: bf16 weights and Adam moments).

Issue #58: what follows training leaves nothing outside either. ``export RUN``, ``eval RUN
--dataset FILE`` and ``eval MODEL_FOLDER`` (a folder of no run) under the same fake HOME and
TMPDIR: before the fix they left torchinductor_root in TMPDIR, the datasets' Arrow cache in
~/.cache/huggingface/datasets and ``MODEL_FOLDER.eval/`` beside the user's model; now the run's
folders (and, for a folder of no run, hpc-grpo's home) hold all of it."""

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


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cli = str(Path(sys.executable).with_name("hpc-grpo"))
    proc = subprocess.run([cli, *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.slow
def test_a_local_run_leaves_nothing_in_tmp_or_the_home_cache(tmp_path: Path) -> None:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(f'{{"prompt": "Say {w}:"}}\n' for w in ("hi", "cat", "red", "one")))
    mine = tmp_path / "mine"  # a model folder of the user's, not a run
    fake = {"HOME": str(home), "TMPDIR": str(tmp)}
    _cli("example-model", str(mine / "tiny"), cwd=tmp_path, env=fake)
    before = (_listing(tmp), _listing(home))
    proc = _cli("submit", "--site", "local", "--model", "builtin:tiny", "--dataset", str(data),
         "--set", "max_steps=2", "--set", "per_device_train_batch_size=4", "--set",
         "num_generations=4", "--set", "max_completion_length=8", "--set", "save_steps=2",
         "--set", "torch_dtype=bfloat16",
         "--output-root", str(tmp_path / "runs"), cwd=tmp_path, env=fake)
    run_dir = submitted(proc.stdout)[2]
    assert (run_dir / "summary.json").exists()
    assert (_listing(tmp), _listing(home)) == before
    assert (run_dir.parent / ".datasets-cache").is_dir()  # the output root's, instead
    assert _dtypes(run_dir / "checkpoints" / "checkpoint-2" / "model.safetensors") == {"F32"}

    # After training (#58): export, eval of the run on a dataset file, eval of a folder of no run.
    outside = _listing(mine)
    _cli("export", str(run_dir), cwd=tmp_path, env=fake)
    assert (_listing(tmp), _listing(home)) == before
    _cli("eval", str(run_dir), "--dataset", str(data), "--limit", "2", "--max-new-tokens", "4",
         cwd=tmp_path, env=fake)
    assert (_listing(tmp), _listing(home)) == before
    done = _cli("eval", str(mine / "tiny"), "--dataset", str(data), "--reward-funcs",
                "builtin:length", "--limit", "2", "--max-new-tokens", "4", "--json", cwd=tmp_path,
                env=fake)
    assert (_listing(tmp), _listing(home), _listing(mine)) == (*before, outside)
    hpc_home = Path(os.environ["HPC_GRPO_HOME"])  # per-user state: hpc-grpo's own home
    assert Path(json.loads(done.stdout)["path"]).is_relative_to(hpc_home / "evals")
    assert list((run_dir / "tmp").glob("*")) == []  # the children's temporaries went with them
