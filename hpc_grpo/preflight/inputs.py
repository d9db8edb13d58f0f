"""Check what the ranks will load (model, dataset, reward functions) from the login node.

Everything that can be known before submitting is checked here, so a typo costs seconds, not a
queue wait. Reads files, imports reward modules: not pure, so it stays out of ``plan``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError, did_you_mean
from hpc_grpo.planner import ModelArch, arch_from_config, lookup_model
from hpc_grpo.planner.blocks import dataset_block, model_block
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.preflight.dataset_file import FORMATS, local_columns
from hpc_grpo.rundir.checkpoints import checkpoint_step, existing_parent, free_bytes_or_none
from hpc_grpo.rundir.child_call import call_child
from hpc_grpo.rundir.contract import CHECKPOINTS
from hpc_grpo.rundir.hub import hub_snapshot
from hpc_grpo.rundir.workspace import Workspace, library_dirs

# runtime/models/build.py SHAPES (the launcher may not import it; a unit test keeps them equal)
BUILTIN_MODELS = ("builtin:tiny", "builtin:qwen2-0.5b", "builtin:qwen2-1.5b", "builtin:qwen2-7b")
# Their max_position_embeddings (shapes.py too), so that the context is checked before they are built.
BUILTIN_CONTEXT = {"builtin:tiny": 512, "builtin:qwen2-0.5b": 4096, "builtin:qwen2-1.5b": 4096,
                   "builtin:qwen2-7b": 4096}
BUILTIN_DATASETS = ("builtin:digits", "builtin:sums")
BUILTIN_REWARDS = ("builtin:accuracy", "builtin:digits", "builtin:format", "builtin:length",
                   "builtin:length_penalty", "builtin:sum_correct", "builtin:tag_count")
# Built-in rewards of smoke runs: on a built-in dataset nothing is left for the probe to learn.
SMOKE_REWARDS = ("builtin:digits", "builtin:length", "builtin:sum_correct")
PROBE_MODULE = "hpc_grpo.runtime.rank.data.inputs_probe"
PROBE_TIMEOUT_S = 900  # tokenising a large dataset's prompts takes a while; a hang must not
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
        if (folder / "config.json").exists() and has_weights(folder):  # else built (again) by submit
            return _local_model(folder)
        # built by submit; planned from the shape it will be built with
        return ModelRef(str(folder), local=True, arch=builtin_arch(folder.name),
                        context=BUILTIN_CONTEXT[name])
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
    if path.exists() and not path.is_dir():  # was "does not exist", of a file that does (#58)
        raise UserError(f"model path {path} is a file, not a model folder", field="model",
                        hint="give the folder save_pretrained wrote (config.json, weights and "
                        "tokenizer in it), or a hub id")
    if not path.is_dir():
        raise UserError(f"model path {path} does not exist", field="model",
                        hint="check the path, or give a hub id such as Qwen/Qwen2.5-0.5B")
    config = path / "config.json"
    if not config.exists():
        raise UserError(f"model folder {path} has no config.json", field="model",
                        hint="give the folder save_pretrained wrote, or a hub id")
    if not any((path / f).exists() for f in _TOKENIZER_FILES):
        raise UserError(
            f"model folder {path} has no tokenizer",
            field="model",
            hint="save the tokenizer beside the weights (tokenizer.save_pretrained(folder))",
        )
    _refuse_without_weights(path)
    try:
        arch: ModelArch | None = arch_from_config(json.loads(config.read_text()), path.name)
    except (UserError, json.JSONDecodeError):
        arch = None
    return ModelRef(str(path.resolve()), local=True, arch=arch)


# A model folder's weights as transformers reads them: safetensors or torch files, sharded or
# not (the index names the shards), or a LoRA adapter's file. Named, not ``*.bin``: every Trainer
# checkpoint holds training_args.bin, which is not weights
_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin",
                 "*.safetensors.index.json", "*.bin.index.json")


def has_weights(path: Path) -> bool:
    return any(next(path.glob(pattern), None) for pattern in _WEIGHT_FILES)


def _refuse_without_weights(path: Path) -> None:
    """A folder without weights would fail on the nodes after the queue wait. The common case is
    a full-parameter DeepSpeed checkpoint given as the model: its weights are ZeRO shards
    (``global_step*/``), which transformers cannot load; ``hpc-grpo export`` writes the model."""
    if has_weights(path):
        return
    deepspeed = (path / "latest").is_file() or any(path.glob("global_step*"))
    if not deepspeed:
        raise UserError(f"model folder {path} has no weights (no *.safetensors or "
                        "pytorch_model*.bin files)", field="model",
                        hint="give the folder save_pretrained wrote, or a hub id")
    path = path.resolve()  # `--model .` inside the checkpoint still names its run
    step = checkpoint_step(path)
    run = path.parent.parent if step is not None and path.parent.name == CHECKPOINTS else None
    command = (f"hpc-grpo export {run} --step {step}" if run and step is not None
               else "hpc-grpo export RUN --step N")
    raise UserError(
        f"model folder {path} is a DeepSpeed checkpoint: its weights are ZeRO shards, which "
        "transformers and vLLM cannot load", field="model",
        hint=f"`{command}` writes it as a model folder (RUN_DIR/export/step-N); give that folder")


def check_dataset(name: str, prompt_column: str) -> str:
    """Return the dataset as the ranks should load it; local files are checked for the column."""
    if name.startswith("builtin:"):
        if name not in BUILTIN_DATASETS:
            raise UserError(f"unknown built-in dataset '{name}'", field="dataset",
                            hint=did_you_mean(name, BUILTIN_DATASETS))
        return name
    path = Path(name).expanduser()
    if not path.exists():
        if name.startswith(("/", ".", "~")) or path.suffix in FORMATS:
            raise UserError(f"dataset file {path} does not exist", field="dataset",
                            hint="check the path, or give builtin:NAME or a hub id (org/name)")
        return name  # a hub dataset: only the nodes can tell
    columns = local_columns(path)
    if columns is not None and prompt_column not in columns:
        raise UserError(
            f"dataset {path} has no column '{prompt_column}' (columns: {', '.join(columns)})",
            field="prompt_column",
            hint=did_you_mean(prompt_column, columns) + "; set prompt_column in the recipe",
        )
    return str(path.resolve())


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


@dataclass(frozen=True)
class Probed:
    """What the login-node probe learnt: the longest prompt in tokens of the model's tokenizer
    (None: not measured) and lines for the user (what was skipped and why)."""

    longest_prompt: int | None = None
    notes: tuple[str, ...] = ()
    rewards: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)


def needs_probe(spec: JobSpec) -> bool:
    """A built-in dataset with smoke rewards has nothing to learn (and the README job stays as
    fast as it was); anything else is loaded and called once."""
    builtin = spec.dataset.startswith("builtin:")
    if spec.attn_implementation.startswith("flash_attention"):  # is flash-attn installed there?
        return True
    return not (builtin and all(r in SMOKE_REWARDS for r in spec.reward_funcs))


def probe_request(spec: JobSpec, model: ModelRef, dataset_commit: str = "") -> dict[str, Any]:
    """The probe's input: run.json's dataset and model blocks and the reward fields. A staged
    model or dataset is read from its pinned snapshot folder, as the ranks will read it."""
    dataset = dataset_block(spec, 0, dataset_commit)
    source = model.source
    if model.commit and model.hf_home:
        source = hub_snapshot(model.hf_home, "model", model.source, model.commit)
    if dataset_commit and model.hf_home:
        dataset = dataclasses.replace(
            dataset, name=hub_snapshot(model.hf_home, "dataset", spec.dataset, dataset_commit))
    return {"dataset": dataclasses.asdict(dataset), "model": source,
            "model_load": dataclasses.asdict(model_block(spec, model)),
            "reward_funcs": list(spec.reward_funcs), "reward_kwargs": dict(spec.reward_kwargs),
            "reward_weights": list(spec.reward_weights)}


def probe_inputs(spec: JobSpec, model: ModelRef, python: str, dataset_commit: str = "") -> Probed:
    """Run the runtime's inputs probe in a child process with the site's python (the launcher
    never imports torch): rewards imported and called on the first row, the dataset loaded and
    its longest prompt measured. A problem the ranks would hit is a UserError here; a machine
    without the training stack is a note, not a failure. Offline: nothing is downloaded."""
    if not needs_probe(spec):
        return Probed()
    request = probe_request(spec, model, dataset_commit)
    if model.local and not Path(model.source).exists():
        request["model"] = ""  # a built-in model not built yet: submit measures once it is
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    if request["model_load"].get("hf_home"):
        env["HF_HOME"] = request["model_load"]["hf_home"]
    with tempfile.TemporaryDirectory(prefix="hpc-grpo-probe-") as tmp:
        # no run directory yet: what torch, datasets, W&B leave in /tmp or ~/.cache goes with
        # the folder (rundir/workspace.py's rule, the folder standing in for the run's)
        env.update(library_dirs(Workspace(Path(tmp), Path(tmp)), Path(tmp), env))
        outcome = call_child(python, PROBE_MODULE, request, env=env, folder=Path(tmp),
                             timeout=PROBE_TIMEOUT_S)
    if outcome.answer is None:
        why = outcome.why if not outcome.started else f"{python}: {outcome.why}"
        return Probed(notes=(f"rewards and prompts not checked on this machine ({why})",))
    return _read_answer(outcome.answer)


def _read_answer(answer: dict[str, Any]) -> Probed:
    if "skipped" in answer:
        return Probed(notes=(str(answer["skipped"]),))
    if "error" in answer:
        raise UserError(str(answer["error"]), field=str(answer.get("field") or ""),
                        hint="checked on this machine with the runtime's own code; the ranks "
                             "would fail the same way")
    longest = answer.get("longest_prompt_tokens")
    return Probed(longest_prompt=int(longest) if longest is not None else None,
                  notes=tuple(str(n) for n in answer.get("notes") or ()),
                  rewards=dict(answer.get("rewards") or {}))


def with_prompt_bound(spec: JobSpec, probed: Probed) -> JobSpec:
    """The spec the plan sizes vLLM with: the measured longest prompt where the user set no
    max_prompt_length (built-in datasets keep their fixed bound); a longer prompt than the
    user's bound is refused here rather than by every rank after the queue wait."""
    longest = probed.longest_prompt
    if longest is None or spec.dataset.startswith("builtin:"):
        return spec
    if not spec.max_prompt_length:
        return dataclasses.replace(spec, max_prompt_length=max(longest, 1))
    if longest > spec.max_prompt_length:
        raise UserError(f"dataset {spec.dataset} has a prompt of {longest} tokens (measured with "
                        f"the model's tokenizer), above max_prompt_length {spec.max_prompt_length}",
                        field="max_prompt_length",
                        hint=f"--set max_prompt_length={longest}, or leave it unset to use the "
                             "measured length")
    return spec


def free_space(root: Path) -> tuple[int | None, str]:
    """Free bytes of the file system that will hold ``root`` (its nearest existing parent, as
    the run directory may not exist yet) and how to name it; (None, "") when it cannot be read."""
    free = free_bytes_or_none(root)
    return (free, f"the output file system ({existing_parent(root)})") if free is not None \
        else (None, "")


def with_run_checkpoints(free: tuple[int | None, str], run_dir: Path) -> tuple[int | None, str]:
    """Resume: the run's own checkpoint folders count as room, as the plan sizes how many of them
    exist at once (its ranks delete the old and the incomplete ones after each complete save)."""
    folder = run_dir / CHECKPOINTS
    if free[0] is None or not folder.is_dir():
        return free
    held = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return free[0] + held, free[1]
