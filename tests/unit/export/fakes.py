"""A run directory with checkpoints of each layout, made of files only (no torch): safetensors
headers written by hand, DeepSpeed's tag and shard names, an adapter."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

TINY_CONFIG = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "vocab_size": 512, "max_position_embeddings": 512, "tie_word_embeddings": True}


def safetensors(path: Path, shapes: dict[str, list[int]], dtype: str = "F32") -> None:
    """A valid safetensors file of zeros with these tensor shapes."""
    header: dict[str, Any] = {}
    offset = 0
    width = {"F32": 4, "BF16": 2}[dtype]
    for name, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count * width]}
        offset += count * width
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def checkpoint(run_dir: Path, step: int, kind: str = "full", complete: bool = True) -> Path:
    folder = run_dir / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    (folder / "tokenizer.json").write_text("{}")
    if kind == "full":
        safetensors(folder / "model.safetensors", {"a": [10, 10], "b": [5]})  # 105 params
    elif kind == "zero":
        (folder / "latest").write_text(f"global_step{step}")
        (folder / f"global_step{step}").mkdir()
        (folder / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    elif kind == "lora":
        (folder / "adapter_config.json").write_text("{}")
        safetensors(folder / "adapter_model.safetensors", {"lora_A": [4, 8], "lora_B": [8, 4]})
    if complete:
        (folder / "hpc_grpo_complete.json").write_text(json.dumps({"step": step, "world_size": 2}))
    return folder


def run_dir(tmp: Path, *, device: str = "cpu", model: str = "", **over: Any) -> Path:
    folder = tmp / "runs" / "tiny-0001"
    folder.mkdir(parents=True)
    record = {"schema": 1, "run_id": "tiny-0001", "run_dir": str(folder), "model": model or "/m",
              "device": device, "dataset": {"name": "builtin:digits", "prompt_column": "prompt",
                                            "split": "train"},
              "reward_funcs": ["builtin:length"], "grpo_config": {"max_steps": 4},
              "nodes": 1, "procs_per_node": 1, **over}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward_mean": -30.0 + s}) + "\n" for s in range(1, 5)))
    return folder


def base_model(tmp: Path) -> Path:
    folder = tmp / "base"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    safetensors(folder / "model.safetensors", {"w": [100, 10]})  # 1000 params
    return folder
