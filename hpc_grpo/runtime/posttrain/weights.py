"""A checkpoint's model, loaded in fp32 from whichever layout the ranks saved.

* ``full``: ``model.safetensors`` (ZeRO off; also ZeRO-1/2, and ZeRO-3 with
  ``stage3_gather_16bit_weights_on_model_save``): transformers loads the folder as it is.
* ``zero``: DeepSpeed's own files only (full-parameter ZeRO-3: the runtime gathers no model
  file there): the fp32 master weights through DeepSpeed's ``zero_to_fp32``, put into
  the architecture of the checkpoint's config.json.
* ``lora``: the adapter on top of the run's base model, through peft (unmerged).

Each returns a model in eval mode, fp32: the reference the export is checked against and the
source it is written from.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any


class WeightsError(RuntimeError):
    """A checkpoint whose weights cannot be put back into its model; one line."""


def _float32() -> Any:
    import torch  # here: the module imports without torch

    return torch.float32


def load_full(folder: str | Path) -> Any:
    """A folder transformers loads as it is (a checkpoint with model.safetensors, an export)."""
    from transformers import AutoModelForCausalLM  # here: the module imports without the training stack

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_float32())
    return model.eval()


def zero_state_dict(checkpoint: str | Path) -> dict[str, Any]:
    """DeepSpeed's fp32 master weights of a ZeRO-1/2/3 checkpoint (its ``latest`` tag), gathered
    from every rank's partition on this host. DeepSpeed prints its progress; kept quiet."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # no stack at import

    with contextlib.redirect_stdout(io.StringIO()):
        state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
    return dict(state)


def from_state_dict(config_folder: str | Path, state: dict[str, Any]) -> Any:
    """The checkpoint's architecture with ``state`` in it. Every parameter must come from the
    state dict, except an lm_head tied to the embedding (ZeRO-3 keeps only one of the two)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig  # no stack at import

    config = AutoConfig.from_pretrained(str(config_folder))
    model = AutoModelForCausalLM.from_config(config, dtype=_float32())
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise WeightsError(f"the DeepSpeed weights do not fit the checkpoint's config.json: "
                           f"missing {missing[:3]}, unexpected {list(unexpected)[:3]}")
    model.tie_weights()
    if (Path(config_folder) / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(str(config_folder))
    return model.eval()


def load_zero(checkpoint: str | Path) -> Any:
    return from_state_dict(checkpoint, zero_state_dict(checkpoint))


def load_lora(base: str, adapter: str | Path) -> Any:
    """The base model with the checkpoint's adapter, unmerged (what the ranks trained)."""
    from peft import PeftModel  # here: the module imports without the training stack

    return PeftModel.from_pretrained(load_full(base), str(adapter)).eval()


def load(layout: str, checkpoint: str, base: str = "") -> Any:
    """The checkpoint's model for ``layout`` ("full", "zero" or "lora")."""
    if layout == "full":
        return load_full(checkpoint)
    if layout == "zero":
        return load_zero(checkpoint)
    if layout == "lora":
        return load_lora(base, checkpoint)
    raise WeightsError(f"unknown checkpoint layout {layout!r}")
