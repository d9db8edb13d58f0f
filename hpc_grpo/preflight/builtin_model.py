"""The offline example models (``builtin:NAME``): built on first use by the runtime's own
builder in a child process, so the launcher never imports torch and no hub is needed."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.errors import UserError
from hpc_grpo.preflight import inputs
from hpc_grpo.rundir.checkpoints import folder_blocked
from hpc_grpo.rundir.shapes import SHAPES
from hpc_grpo.runs import registry


@dataclass(frozen=True)
class ExampleModel:
    """`hpc-grpo example-model DIR`'s answer: the folder, and whether it held the model already."""

    path: Path
    already: bool = False


def example_model(shape: str, target: Path, python: str = sys.executable) -> ExampleModel:
    """The example model written into ``target``, a new or empty folder; one that already
    holds this example model (its shape in config.json, and weights) is left as it is, and any
    other non-empty folder is refused: the builder would write over the files of the same
    names and leave the others, a folder of two models (issue #58)."""
    target = target.expanduser()
    if target.exists() and not target.is_dir():
        raise UserError(f"{target} is a file, not a folder", field="directory",
                        hint="name a new or empty folder")
    if target.is_dir() and any(target.iterdir()):
        if holds_example(shape, target):
            return ExampleModel(target, already=True)
        raise UserError(f"{target} is not empty and does not hold the example model "
                        f"builtin:{shape}", field="directory",
                        hint="name a new or empty folder, or remove this one")
    return ExampleModel(write_example_model(shape, target, python))


def holds_example(shape: str, folder: Path) -> bool:
    """Whether ``folder`` holds the example model ``shape``: its config.json has that shape's
    sizes (rundir/shapes.py) and the folder has weights."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    want = SHAPES[shape]
    sizes = {key: getattr(want, key) for key in ("hidden_size", "intermediate_size",
                                                 "num_hidden_layers", "num_attention_heads",
                                                 "num_key_value_heads", "max_position_embeddings")}
    return isinstance(config, dict) and all(config.get(k) == v for k, v in sizes.items()) \
        and (not want.vocab_size or config.get("vocab_size") == want.vocab_size) \
        and inputs.has_weights(folder)


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
        # A folder it cannot write (FileNotFoundError under /proc, PermissionError) was blamed
        # on a missing runtime extra (#58): that hint is for a missing module only.
        missing = "ModuleNotFoundError" in last or "No module named" in last
        raise UserError(f"could not build the model builtin:{shape}: {last}", field="model",
                        hint="install the runtime extra: pip install 'hpc-grpo[runtime]'"
                        if missing else f"give a folder you can write, with room for the model "
                        f"(not {target})")
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
