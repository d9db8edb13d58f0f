"""How the ranks load the model: run.json's ModelBlock as GRPOConfig's ``model_init_kwargs``,
its PeftBlock as a peft ``LoraConfig`` (QLoRA: a 4-bit ``BitsAndBytesConfig``), and the tokenizer.

LoRA through TRL: ``GRPOTrainer(peft_config=...)`` wraps the model with ``get_peft_model``. What
vLLM receives each step is the merged weights: TRL's weight sync (trl/generation/
vllm_generation.py ``_iter_named_params``) calls ``merge_adapter()``, sends the base names and
``unmerge_adapter()`` after; in bf16 that rounds the frozen base a little every step, so the
runtime swaps in a walk that merges each layer from a copy and restores it (rank/generation/lora_sync.py).
A resumed run loads the checkpoint's ``adapter_model.safetensors``
into the same "default" adapter (transformers' ``Trainer._load_from_checkpoint``:
``model.load_adapter(checkpoint, active_adapter, is_trainable=True)``), so a requeue continues
the adapter instead of stacking a second one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import ModelBlock, PeftBlock, RunRecord
from hpc_grpo.runtime.models.tiny import load_tokenizer as load_folder


class ModelLoadError(ValueError):
    """A model setting this node cannot honour (QLoRA without CUDA or bitsandbytes, ...)."""


def init_kwargs(block: ModelBlock) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments from the ModelBlock; only what the user set."""
    out: dict[str, Any] = {}
    if block.commit and block.hf_home:
        pass  # staged: the ranks load the pinned commit's snapshot folder (runtime/shared/staged.py)
    elif block.commit or block.revision:
        out["revision"] = block.commit or block.revision  # the pinned commit wins
    if block.dtype:
        out["dtype"] = block.dtype
    if block.attn_implementation:
        out["attn_implementation"] = block.attn_implementation
    if block.trust_remote_code:
        out["trust_remote_code"] = True
    return out


def merge_init_kwargs(user: Mapping[str, Any] | None, block: ModelBlock) -> dict[str, Any] | None:
    """GRPOConfig's model_init_kwargs: the recipe's own, plus the model block's settings; the same
    key with two different values is refused (which one did the user mean?)."""
    ours = init_kwargs(block)
    theirs = dict(user or {})
    for key, value in ours.items():
        if key in theirs and theirs[key] != value:
            raise ModelLoadError(f"model_init_kwargs sets {key}={theirs[key]!r} but the job's model "
                                 f"settings give {value!r}; set it in one place")
    merged = {**theirs, **ours}
    return merged or None


def check_quantization(peft: PeftBlock | None, device: str) -> None:
    """QLoRA needs CUDA and bitsandbytes: refuse before the model loads, in one line."""
    if peft is None or not peft.load_in_4bit:
        return
    if device != "cuda":
        raise ModelLoadError("load_in_4bit (QLoRA) needs CUDA GPUs (bitsandbytes 4-bit kernels); "
                             "this site trains on CPU: drop load_in_4bit and keep use_peft for LoRA")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError("load_in_4bit (QLoRA) needs bitsandbytes on the compute nodes: "
                             "pip install bitsandbytes")


def quantization_config(peft: PeftBlock | None) -> Any:
    """A 4-bit NF4 BitsAndBytesConfig for QLoRA (bf16 compute), else None."""
    if peft is None or not peft.load_in_4bit:
        return None
    import torch  # here: the module imports without torch
    from transformers import BitsAndBytesConfig  # here: the module imports without the training stack

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.bfloat16)


def lora_config(peft: PeftBlock | None) -> Any:
    """peft's LoraConfig from the PeftBlock, or None for full fine-tuning. No target modules:
    peft's default for the architecture (q_proj/v_proj for Qwen2 and Llama)."""
    if peft is None:
        return None
    from peft import LoraConfig  # here: the module imports without the training stack

    return LoraConfig(r=peft.r, lora_alpha=peft.alpha, lora_dropout=peft.dropout,
                      target_modules=list(peft.target_modules) or None, task_type="CAUSAL_LM")


def trainer_kwargs(run: RunRecord) -> dict[str, Any]:
    """GRPOTrainer's ``peft_config`` and ``quantization_config`` for this run (empty: full FT)."""
    check_quantization(run.peft, run.device)
    out: dict[str, Any] = {}
    if run.peft is not None:
        out["peft_config"] = lora_config(run.peft)
    quant = quantization_config(run.peft)
    if quant is not None:
        out["quantization_config"] = quant
    return out


def load_tokenizer(model: str, block: ModelBlock) -> Any:
    """The tokenizer as the ranks use it: a folder's tokenizer.json as a fast tokenizer (the
    built-in models'), otherwise AutoTokenizer at the block's revision."""
    if (Path(model) / "tokenizer.json").exists():
        return load_folder(model)
    from transformers import AutoTokenizer  # here: the module imports without the training stack

    kwargs = {k: v for k, v in init_kwargs(block).items() if k in ("revision", "trust_remote_code")}
    return AutoTokenizer.from_pretrained(model, **kwargs)
