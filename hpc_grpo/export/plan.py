"""What an export will do, decided before anything is written: checkpoint, layout, mode, dtype,
target, and how much disk and host memory it needs. Refusals are one line each.

Sizes are the folder's, not the checkpoint's (which also holds the optimizer states): the
weights file is the parameter count (safetensors headers, or config.json where only DeepSpeed's
shards exist) times the written dtype's bytes (an adapter: its own file, copied as it is), beside
the checkpoint's config and tokenizer files, the model card and the run's reward curve; the
free-space check adds a margin (``MARGIN_BYTES``). Host memory: the export holds the model in
fp32, and the check then holds two fp32 models at once (the checkpoint's and the exported one):
8 bytes per parameter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.export import layout
from hpc_grpo.planner.memory.arch import arch_from_config
from hpc_grpo.rundir.checkpoints import folder_blocked, run_checkpoints
from hpc_grpo.rundir.contract import EXPORT_DIR, REWARD_CURVE, RunRecord
from hpc_grpo.rundir.hub import hub_snapshot

GIB = float(2**30)
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
FLAGS = {dtype: flag for flag, dtype in DTYPES.items()}  # a written dtype's --dtype flag
BYTES = {"bfloat16": 2, "float32": 4}
MARGIN_BYTES = 2**20  # free space asked beyond the folder's estimate (headers, file system)
CARD_BYTES = 4096  # README.md, the model card: about 1-2 KiB


@dataclass(frozen=True)
class ExportPlan:
    run_id: str
    run_dir: Path
    checkpoint: Path
    step: int
    layout: str  # full, zero, lora
    adapter: bool  # LoRA: write the adapter instead of merging it into the base
    dtype: str  # float32, bfloat16 (the adapter keeps its own)
    base: str  # LoRA: the base model folder; "" otherwise
    target: Path
    num_params: int
    weights_bytes: int  # the weights file(s) the folder will hold
    other_bytes: int  # its config, tokenizer, model card and reward curve
    host_bytes: int

    @property
    def disk_bytes(self) -> int:
        """Free space the export needs: the folder and a margin."""
        return self.weights_bytes + self.other_bytes + MARGIN_BYTES

    @property
    def mode(self) -> str:
        if self.layout != "lora":
            return "full"
        return "adapter" if self.adapter else "merged"

    def request(self, folder: Path) -> dict[str, Any]:
        """The runtime child's request (runtime/posttrain/export.py), writing into ``folder``."""
        return {"checkpoint": str(self.checkpoint), "layout": self.layout, "base": self.base,
                "target": str(folder), "dtype": self.dtype, "adapter": self.adapter,
                "num_params": self.num_params}

    @property
    def written_dtype(self) -> str:
        """The dtype the weights are written in (an adapter keeps the one it trained in)."""
        return "adapter's own dtype" if self.mode == "adapter" else self.dtype

    def line(self) -> str:
        what = {"full": "weights", "merged": "LoRA merged into the base",
                "adapter": "LoRA adapter"}[self.mode]
        weights = layout.ADAPTER_WEIGHTS if self.mode == "adapter" else layout.MODEL_FILE
        return (f"export {self.run_id} checkpoint-{self.step} ({self.layout} layout, {what}, "
                f"{self.written_dtype}) -> {self.target}: {self.num_params:,} parameters; the "
                f"folder will hold about {size(self.weights_bytes + self.other_bytes)} ({weights} "
                f"{size(self.weights_bytes)}, config, tokenizer, model card and reward curve "
                f"{size(self.other_bytes)}); the export holds about {size(self.host_bytes)} of "
                "host memory")


def size(count: int) -> str:
    if count >= GIB / 10:
        return f"{count / GIB:.2f} GiB"
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 / 10 else f"{count / 2**10:.1f} KiB"


def memory_note(needed: int, available: int | None) -> str:
    """A warning when the host has less memory available than the export holds ("" fine): the
    export is not refused (the estimate is a bound), but a login node may kill it."""
    if available is None or needed <= available:
        return ""
    return (f"the export holds about {size(needed)} in host memory but {size(available)} are "
            "available here: it may be killed (run it on a node with more memory)")


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def dtype_of(flag: str | None, device: str) -> str:
    """The dtype to write: the flag's, else the training dtype (bf16 on GPUs, fp32 on CPU)."""
    if flag is None:
        return "bfloat16" if device == "cuda" else "float32"
    if flag not in DTYPES:
        raise UserError(f"unknown dtype {flag!r}", field="dtype", hint="bf16 or fp32")
    return DTYPES[flag]


def base_model(record: RunRecord) -> str:
    """The folder a LoRA run's base model loads from: its staged snapshot, or the model as
    given when that is a folder here. A hub name that is not staged cannot be merged offline."""
    model, load = record.model, record.model_load
    if load.commit and load.hf_home:
        model = hub_snapshot(load.hf_home, "model", model, load.commit)
    if not (Path(model) / "config.json").exists():
        raise UserError(f"the run's base model {model} is not a model folder on this machine",
                        field="model", hint="stage it (`hpc-grpo stage`) or export with --adapter")
    return model


def count_params(kind: str, checkpoint: Path, base: str) -> int:
    """Parameters written: from safetensors headers, or config.json for DeepSpeed shards."""
    if kind == "adapter":
        return layout.safetensors_elements(checkpoint / layout.ADAPTER_WEIGHTS)
    folder = Path(base) if kind == "merged" else checkpoint
    files = layout.weight_files(folder)
    if files:
        return sum(layout.safetensors_elements(f) for f in files)

    config = json.loads((checkpoint / "config.json").read_text())
    try:
        return arch_from_config(config, checkpoint.name).num_params
    except UserError:  # an architecture the planner does not model (MoE, GPT-2 style keys)
        return _params_from_shards(checkpoint)


def _params_from_shards(checkpoint: Path) -> int:
    """Parameters of DeepSpeed's shards from their sizes, without torch: every rank's optimizer
    file holds 12 B per parameter of its partition (fp32 master weights, Adam's m and v)."""
    optimizer = sum(f.stat().st_size for f in checkpoint.glob("global_step*/*optim_states.pt"))
    if not optimizer:
        raise UserError(f"cannot count the parameters of {checkpoint.name}: no config the planner "
                        "knows and no DeepSpeed optimizer files", field="checkpoint")
    return optimizer // 12


def target_of(to: str | None, run_dir: Path, step: int, adapter: bool) -> Path:
    if to:
        return Path(to).expanduser().resolve()
    return run_dir / EXPORT_DIR / (f"step-{step}" + ("-adapter" if adapter else ""))


def refuse_target(target: Path) -> None:
    """An existing target must be an empty folder: an export never writes over another. A
    target that is a file or lies under one was a FileExistsError traceback from the mkdir."""
    if where := folder_blocked(target):
        raise UserError(f"export target {target} {where}, not a folder", field="to",
                        hint="pass --to a new or empty folder")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"{target} already exists and is not empty", field="to",
                        hint="pass --to an empty or new folder, or remove it")


def refuse_space(plan: ExportPlan, free: int | None) -> None:
    if free is not None and free < plan.disk_bytes:
        raise UserError(f"the export needs {size(plan.disk_bytes)} but {size(free)} are free "
                        f"under {plan.target.parent}",
                        field="to", hint="free space, or --to a folder on another file system")


def build(run_dir: Path, record: RunRecord, step: int | None, to: str | None,
          dtype: str | None, adapter: bool, allow_existing: bool = False) -> ExportPlan:
    """The plan, or a UserError: no such or incomplete checkpoint, --adapter without LoRA,
    a base model not here, a non-empty target (``allow_existing``: the plan of a finished
    export already there, to push it)."""
    run_id = record.run_id or run_dir.name
    chosen = layout.pick(run_checkpoints(run_dir), step, run_id)
    kind = layout.detect(layout.file_names(chosen.path))
    if adapter and kind != "lora":
        raise UserError(f"checkpoint-{chosen.step} of run {run_id} holds full weights, not a "
                        "LoRA adapter", field="adapter", hint="drop --adapter")
    base = base_model(record) if kind == "lora" else ""
    written = dtype_of(dtype, record.device or "cpu")
    mode = ("adapter" if adapter else "merged") if kind == "lora" else "full"
    params = count_params(mode, chosen.path, base)  # merged: the base model's size
    if mode == "adapter":  # copied in its own dtype, with its config
        weights = (chosen.path / layout.ADAPTER_WEIGHTS).stat().st_size
        other = (chosen.path / layout.ADAPTER_CONFIG).stat().st_size
    else:
        weights, other = params * BYTES[written], 0
    curve = run_dir / REWARD_CURVE
    other += layout.small_files_bytes(chosen.path) + CARD_BYTES + \
        (curve.stat().st_size if curve.is_file() else 0)
    held = count_params("merged", chosen.path, base) if mode == "adapter" else params
    target = target_of(to, run_dir, chosen.step, adapter)
    if not allow_existing:
        refuse_target(target)
    return ExportPlan(run_id, run_dir, chosen.path, chosen.step, kind, adapter, written, base,
                      target, params, weights, other, held * 8)
