"""A checkpoint folder for the rank's checkpoint tests (moved out of test_runtime_checkpoints.py)."""

from __future__ import annotations

import json
from pathlib import Path

from hpc_grpo.runtime.rank.checkpoints.folders import write_marker


def make_checkpoint(root: Path, step: int, *, marker: bool = True, state_step: int | None = None) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    if state_step is not None:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": state_step}))
    if marker:
        write_marker(folder, step, world_size=2)
    return folder
