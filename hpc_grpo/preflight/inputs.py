"""Check what the ranks will load (model, dataset, reward functions) from the login node.

Everything that can be known before submitting is checked here, so a typo costs seconds, not a
queue wait. Reads files, imports reward modules: not pure, so it stays out of ``plan``.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.planner import ModelArch, arch_from_config, lookup_model
from hpc_grpo.planner.job import ModelRef

# runtime/models/shapes.py SHAPES (the launcher may not import it; a unit test keeps them equal)
BUILTIN_MODELS = ("builtin:tiny", "builtin:qwen2-0.5b", "builtin:qwen2-1.5b", "builtin:qwen2-7b")
BUILTIN_DATASETS = ("builtin:digits", "builtin:sums")
BUILTIN_REWARDS = ("builtin:digits", "builtin:length", "builtin:sum_correct")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def builtin_model_dir(name: str, home: Path) -> Path:
    """Where a built-in example model is built on first use (per user, shared by runs)."""
    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown built-in model '{name}'", field="model",
                        hint=did_you_mean(name, BUILTIN_MODELS))
    return home / "models" / name.split(":", 1)[1]


def resolve_model(name: str, home: Path) -> ModelRef:
    """A local folder (checked), a built-in example model, a catalogue name or a hub id."""
    if name.startswith("builtin:"):
        folder = builtin_model_dir(name, home)
        if (folder / "config.json").exists():
            return _local_model(folder)
        return ModelRef(str(folder), local=True, arch=None)  # built by submit
    path = Path(name).expanduser()
    looks_local = name.startswith(("/", ".", "~")) or path.exists()
    if looks_local:
        return _local_model(path)
    arch = lookup_model(name)
    if arch is not None:
        return ModelRef(_hub_id(name, arch), local=False, arch=arch)
    if _HUB_ID.match(name):
        return ModelRef(name, local=False, arch=None)
    raise UserError(
        f"model '{name}' is not a folder, a known model or a hub id",
        field="model",
        hint="give a path to a model folder, org/name, or one of `hpc-grpo plan --list-models`",
    )


def _hub_id(name: str, arch: ModelArch) -> str:
    if "/" in name:
        return name
    org = "meta-llama" if arch.name.lower().startswith("llama") else "Qwen"
    return f"{org}/{arch.name}"


def _local_model(path: Path) -> ModelRef:
    if not path.is_dir():
        raise UserError(f"model path {path} does not exist", field="model",
                        hint="check the path, or give a hub id such as Qwen/Qwen2.5-0.5B")
    config = path / "config.json"
    if not config.exists():
        raise UserError(f"model folder {path} has no config.json", field="model")
    if not any((path / f).exists() for f in _TOKENIZER_FILES):
        raise UserError(
            f"model folder {path} has no tokenizer",
            field="model",
            hint="save the tokenizer beside the weights (tokenizer.save_pretrained(folder))",
        )
    try:
        arch: ModelArch | None = arch_from_config(json.loads(config.read_text()), path.name)
    except (UserError, json.JSONDecodeError):
        arch = None
    return ModelRef(str(path.resolve()), local=True, arch=arch)


def check_dataset(name: str, prompt_column: str) -> str:
    """Return the dataset as the ranks should load it; local files are checked for the column."""
    if name.startswith("builtin:"):
        if name not in BUILTIN_DATASETS:
            raise UserError(f"unknown built-in dataset '{name}'", field="dataset",
                            hint=did_you_mean(name, BUILTIN_DATASETS))
        return name
    path = Path(name).expanduser()
    if not path.exists():
        if name.startswith(("/", ".", "~")) or path.suffix in {".jsonl", ".json", ".csv"}:
            raise UserError(f"dataset file {path} does not exist", field="dataset")
        return name  # a hub dataset: only the nodes can tell
    columns = _columns(path)
    if columns is not None and prompt_column not in columns:
        raise UserError(
            f"dataset {path} has no column '{prompt_column}' (columns: {', '.join(columns)})",
            field="prompt_column",
            hint=did_you_mean(prompt_column, columns) + "; set prompt_column in the recipe",
        )
    return str(path.resolve())


def _columns(path: Path) -> list[str] | None:
    try:
        if path.suffix == ".jsonl":
            with path.open() as handle:
                first = handle.readline()
            return list(json.loads(first)) if first.strip() else []
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            rows = data if isinstance(data, list) else data.get("data", [])
            return list(rows[0]) if rows else []
        if path.suffix == ".csv":
            with path.open(newline="") as handle:
                return next(csv.reader(handle), [])
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise UserError(f"dataset {path} does not parse: {exc}", field="dataset") from None
    return None


def check_reward(spec: str) -> None:
    """Built-in names must exist; ``module:function`` must import and be callable here."""
    if spec.startswith("builtin:"):
        if spec not in BUILTIN_REWARDS:
            raise UserError(f"unknown built-in reward '{spec}'", field="reward_funcs",
                            hint=did_you_mean(spec, BUILTIN_REWARDS))
        return
    module_name, sep, func = spec.partition(":")
    if not sep or not module_name or not func:
        raise UserError(f"reward '{spec}' is not builtin:NAME or module:function",
                        field="reward_funcs", hint="e.g. my_rewards:accuracy")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        found = importlib.util.find_spec(module_name)
        module = importlib.import_module(module_name) if found else None
    except Exception as exc:  # any import-time failure of user code
        raise UserError(f"reward module '{module_name}' fails to import: {exc}",
                        field="reward_funcs") from None
    if module is None:
        raise UserError(f"reward module '{module_name}' does not import", field="reward_funcs",
                        hint="is it on PYTHONPATH (the nodes need it too)?")
    if not callable(getattr(module, func, None)):
        raise UserError(f"'{func}' in {module_name} is not a function", field="reward_funcs")


def free_space(root: Path) -> tuple[int | None, str]:
    """Free bytes of the file system that will hold ``root`` (its nearest existing parent, as
    the run directory may not exist yet) and how to name it; (None, "") when it cannot be read."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free, f"the output file system ({probe})"
    except OSError:
        return None, ""
