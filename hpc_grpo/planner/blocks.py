"""The run record's blocks that copy the job spec: how the ranks load the model, the dataset
and LoRA. Nothing is decided here; the blocks only carry the user's choices to the ranks."""

from __future__ import annotations

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.runtime.contract import DatasetBlock, ModelBlock, PeftBlock


def dataset_block(spec: JobSpec, max_prompt_length: int) -> DatasetBlock:
    return DatasetBlock(name=spec.dataset, prompt_column=spec.prompt_column,
                        split=spec.dataset_split, max_prompt_length=max_prompt_length,
                        config=spec.dataset_config, solution_column=spec.solution_column,
                        system_prompt=spec.system_prompt)


def model_block(spec: JobSpec) -> ModelBlock:
    return ModelBlock(revision=spec.model_revision, dtype=spec.dtype,
                      attn_implementation=spec.attn_implementation,
                      trust_remote_code=spec.trust_remote_code)


def peft_block(spec: JobSpec) -> PeftBlock | None:
    """None for full fine-tuning."""
    if not spec.use_peft:
        return None
    return PeftBlock(r=spec.lora_r, alpha=spec.lora_alpha, dropout=spec.lora_dropout,
                     target_modules=tuple(spec.lora_target_modules), load_in_4bit=spec.load_in_4bit)
