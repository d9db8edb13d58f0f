"""What the plan copies from the job spec: the run record's blocks (how the ranks load the
model, the dataset and LoRA) and the default job name. Nothing is decided here; the blocks only
carry the user's choices to the ranks."""

from __future__ import annotations

from typing import Any

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.planner.save_time import SaveTime
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.rundir.contract import DatasetBlock, HardwareBlock, ModelBlock, PeftBlock


def dataset_block(spec: JobSpec, max_prompt_length: int, commit: str = "") -> DatasetBlock:
    return DatasetBlock(name=spec.dataset, prompt_column=spec.prompt_column,
                        split=spec.dataset_split, max_prompt_length=max_prompt_length,
                        config=spec.dataset_config, solution_column=spec.solution_column,
                        system_prompt=spec.system_prompt, commit=commit)


def model_block(spec: JobSpec, model: ModelRef | None = None,
                site: SiteProfile | None = None) -> ModelBlock:
    """The staged commit and the shared cache come with the model (preflight/stage.py); the
    site says whether the ranks run offline."""
    return ModelBlock(revision=spec.model_revision, dtype=spec.dtype,
                      attn_implementation=spec.attn_implementation,
                      trust_remote_code=spec.trust_remote_code, pure_bf16=spec.pure_bf16,
                      commit=model.commit if model else "", hf_home=model.hf_home if model else "",
                      offline=bool(site and site.nodes_offline is True))


def peft_block(spec: JobSpec) -> PeftBlock | None:
    """None for full fine-tuning."""
    if not spec.use_peft:
        return None
    return PeftBlock(r=spec.lora_r, alpha=spec.lora_alpha, dropout=spec.lora_dropout,
                     target_modules=tuple(spec.lora_target_modules), load_in_4bit=spec.load_in_4bit)


def hardware_block(site: SiteProfile) -> HardwareBlock:
    """What the plan assumed of each node; the ranks compare it with theirs (rundir/hardware.py)."""
    return HardwareBlock(gpus_per_node=site.gpus_per_node, gpu_memory_gib=site.gpu_memory_gib,
                         cpu_memory_gib=site.cpu_memory_gib, gpu_type=site.gpu_type)


def default_name(model: str) -> str:
    """The Slurm job name when the user gives none: from the model's last path part, ASCII
    letters and digits kept (a job name and its run ids are plain tokens, config/names.py: a
    folder named 'modèle' made a name the script refused, blaming a --name never given)."""
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "-" for c in base)
    return f"grpo-{safe}"[:40]


def save_record(save: SaveTime | None) -> dict[str, Any]:
    """run.json's predicted save (``status RUN`` puts each measured save beside it): the seconds,
    the bandwidth a node and its source in one word (``SaveTime.kind``)."""
    if save is None:
        return {}
    return {"predicted_save_s": save.seconds, "save_write_gbs": save.gbs,
            "save_write_source": save.kind}
