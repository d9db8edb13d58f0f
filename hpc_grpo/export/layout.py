"""Which checkpoint, in which layout, and how many parameters: read from file names and headers.

Stdlib only, so the launcher decides without torch. The layouts are what the ranks write
(planner/checkpoint_size.py has the byte counts): ``full`` a ``model.safetensors`` (or its
sharded index) that transformers loads as it is; ``zero`` DeepSpeed's ``global_step<N>/``
shards named by ``latest`` (ZeRO-1/2/3: the fp32 master weights are the exact training state,
and a full-parameter ZeRO-3 checkpoint has no model file at all); ``lora`` an adapter only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.checkpoints import Checkpoint
from hpc_grpo.rundir.contract import CHECKPOINT_MARKER

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MODEL_FILE = "model.safetensors"
MODEL_INDEX = "model.safetensors.index.json"
ZERO_TAG = "latest"  # DeepSpeed: the name of the global_step folder of this save
# Files a model folder needs beside its weights, copied from the checkpoint (sizes only here).
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "special_tokens_map.json", "tokenizer.model", "vocab.json",
               "merges.txt")
_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def pick(found: list[Checkpoint], step: int | None, run_id: str) -> Checkpoint:
    """The newest complete checkpoint, or the one of ``step``; a missing or incomplete one is
    refused (a save cut off half-way has files but no marker, and is never exported)."""
    complete = [c for c in found if c.complete]
    steps = ", ".join(str(c.step) for c in complete) or "none"
    if step is None:
        if not complete:
            raise UserError(f"run {run_id} has no complete checkpoint", field="step",
                            hint="checkpoints are written every save_steps and at the end")
        return complete[-1]
    chosen = next((c for c in found if c.step == step), None)
    if chosen is None:
        raise UserError(f"run {run_id} has no checkpoint-{step}", field="step",
                        hint=f"complete checkpoints: {steps}")
    if not chosen.complete:
        raise UserError(f"checkpoint-{step} of run {run_id} is incomplete (no {CHECKPOINT_MARKER}: "
                        "its save was cut off)", field="step", hint=f"complete checkpoints: {steps}")
    return chosen


def detect(names: Iterable[str]) -> str:
    """``lora``, ``zero`` or ``full`` from a checkpoint's file names (relative paths)."""
    present = set(names)
    if ADAPTER_CONFIG in present:
        return "lora"
    if ZERO_TAG in present and any(n.startswith("global_step") for n in present):
        return "zero"
    if MODEL_FILE in present or MODEL_INDEX in present:
        return "full"
    raise UserError("the checkpoint holds no model weights (no model.safetensors, DeepSpeed "
                    "global_step folder or adapter)", field="checkpoint")


def file_names(folder: Path) -> list[str]:
    """Paths under a checkpoint relative to it (one level of folders: DeepSpeed's global_step)."""
    out = []
    for item in folder.iterdir():
        out.append(item.name)
        if item.is_dir():
            out += [f"{item.name}/{sub.name}" for sub in item.iterdir()]
    return out


def safetensors_elements(path: Path) -> int:
    """Elements of every tensor in a .safetensors file, from its JSON header (8-byte length,
    then JSON): no tensor is read."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for dim in info["shape"]:
            count *= int(dim)
        total += count
    return total


def weight_files(folder: Path) -> list[Path]:
    """The model's .safetensors files in a folder (one file, or the shards its index names)."""
    index = folder / MODEL_INDEX
    if index.exists():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        return [folder / s for s in sorted(shards)]
    return [folder / MODEL_FILE] if (folder / MODEL_FILE).exists() else []


def small_files_bytes(folder: Path) -> int:
    return sum((folder / n).stat().st_size for n in SMALL_FILES if (folder / n).is_file())
