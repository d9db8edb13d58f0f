"""Helpers of the checkpoint-size tests, shared with the retention tests (moved out of
test_checkpoint_size.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api


def _request(tmp_path: Path, **sets: object) -> api.Request:
    return api.Request(site="local", recipe="recipes/tiny-cpu.yaml", output_root=str(tmp_path),
                       sets=tuple(f"{k}={v}" for k, v in sets.items()))


@pytest.fixture
def tiny_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with builtin:tiny's config.json (its shape is all the plan reads)."""
    home = tmp_path / "home"
    model = home / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 522, "tie_word_embeddings": True, "max_position_embeddings": 512}))
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")  # weights: only their presence is read
    monkeypatch.setenv("HPC_GRPO_HOME", str(home))
    return home
