"""The offline example models (``builtin:NAME``): built on first use by the runtime's own
builder in a child process, so the launcher never imports torch and no hub is needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hpc_grpo.errors import UserError
from hpc_grpo.preflight import inputs
from hpc_grpo.rundir.checkpoints import folder_blocked
from hpc_grpo.runs import registry


def write_example_model(shape: str, target: Path, python: str = sys.executable) -> Path:
    """Build an offline example model in ``target`` with the runtime's own builder, in a child
    process: the launcher never imports torch."""
    if where := folder_blocked(target):  # the child's NotADirectoryError, after importing torch
        raise UserError(f"model folder {target} {where}, not a folder", field="directory",
                        hint="give a new or empty folder")
    try:
        proc = subprocess.run(
            [python, "-m", "hpc_grpo.runtime.models.build", shape, str(target)],
            capture_output=True, text=True, check=False,
        )
    except OSError as exc:  # a site's `python:` that this machine cannot run: not a traceback
        raise UserError(f"could not build the model builtin:{shape}: cannot run {python}: "
                        f"{exc.strerror}", field="python",
                        hint="set the site's python: to an interpreter with hpc-grpo[runtime]"
                        ) from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"could not build the model builtin:{shape}: {last}", field="model",
                        hint="install the runtime extra: pip install 'hpc-grpo[runtime]'")
    return target


def ensure_builtin_model(name: str, python: str) -> bool:
    """Build an offline example model once, on first use (no hub needed); True if built now."""
    if not name.startswith("builtin:"):
        return False
    target = inputs.builtin_model_dir(name, registry.home_dir())
    if (target / "config.json").exists() and inputs.has_weights(target):
        return False
    # a build killed half-way (save_pretrained writes config.json first): built again
    write_example_model(name.split(":", 1)[1], target, python)
    return True
