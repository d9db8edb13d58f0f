"""LoRA's weight push to the colocated vLLM engine without changing the frozen base model.

Why: TRL 1.16 pushes a peft model to vLLM by ``merge_adapter()``, reading every weight, then
``unmerge_adapter()`` (trl/generation/vllm_generation.py ``_iter_named_params``). In bf16,
``(W + BA) - BA`` is not ``W``: each push moves about a fifth of the targeted base weights by a
rounding step, and the drift compounds over steps (measured here on peft 0.21: 912 of 4,096
bf16 weights changed after one merge/unmerge, max 4.9e-4, 1.1e-3 after five; reported upstream in
huggingface/trl#6688). The base is meant to be frozen, and a resumed run, which reloads the
base from the model files, cannot reproduce a run whose base has drifted: on 2 x H200 (session
28) a 7B LoRA run stopped at step 2 and resumed matched its uninterrupted twin in rewards but
not in loss from step 3 on. Under ZeRO-3 the drift is discarded already (TRL gathers with
``GatheredParameters`` and no modifier rank, so the shards are not rewritten), but ZeRO 0/1/2,
the one-GPU LoRA layouts, keep it.

What this does instead: the same walk, the same names, the same merged values (peft's own
``merge`` of each layer, so DoRA and other variants merge as peft merges them), but one layer at
a time, from a copy of its base weight, which is written back bit for bit once the merged
tensor has been copied out. vLLM receives exactly what TRL would send on the first push and,
from the second on, what TRL would send if its base had not drifted.

Not used (TRL's walk stays) for FSDP (its own traversal), for adapters with a LoRA bias (the merge
then also changes the base bias, another parameter of the walk) and for quantized base layers
(QLoRA: the merge re-quantizes a bitsandbytes weight). Transient memory: two copies of the
largest targeted weight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hpc_grpo.runtime.rank.context import HookContext

NOTE = ("LoRA weight push merges each layer from a copy of its base weight and restores it "
        "(TRL's merge_adapter/unmerge_adapter would round the frozen bf16 base every step)")
FLOAT_DTYPES = ("torch.bfloat16", "torch.float16", "torch.float32")


def _lora_layers(model: Any) -> list[Any]:
    from peft.tuners.tuners_utils import BaseTunerLayer  # here: the module imports without the training stack

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


NOT_PEFT = "not a peft model"  # why_not's answer for a full-parameter run: nothing to say


def why_not(generation: Any) -> str | None:
    """Why this engine's push must stay TRL's (None: the exact push applies)."""
    from accelerate.utils import is_peft_model  # here: the module imports without the training stack

    model = getattr(generation, "model", None)
    if model is None or not is_peft_model(model):
        return NOT_PEFT
    if getattr(getattr(generation, "_dist", None), "is_fsdp", False):
        return "FSDP walks its own way"
    for layer in _lora_layers(model):
        if any(dict(getattr(layer, "lora_bias", {}) or {}).values()):
            return "an adapter with a LoRA bias"
        weight = getattr(layer.get_base_layer(), "weight", None)
        if weight is None or type(weight).__name__ != "Parameter" \
                or str(weight.dtype) not in FLOAT_DTYPES:
            return "a quantized or non-float base layer (QLoRA)"
    return None


def _merged_copy(layer: Any, param: Any) -> Any:
    """``param`` (a LoRA layer's base weight) as peft's merge makes it; the base left as it was."""
    saved = param.data.clone()
    layer.merge()
    try:
        return param.data.clone()
    finally:
        param.data.copy_(saved)  # into whatever tensor the merge left (a variant may swap it)
        layer.merged_adapters.clear()


def exact_walk(generation: Any) -> Iterator[tuple[str, Any]]:
    """TRL's PEFT branch of ``_iter_named_params`` (names, order, gathering), merging per layer
    from a copy instead of merging the whole model in place and subtracting after."""
    model = generation.model
    owners = {id(layer.get_base_layer().weight): layer for layer in _lora_layers(model)}
    with generation._dist.gather_params(list(model.parameters())):
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue  # adapter tensors (merged instead) and modules_to_save's originals
            name = generation._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."])
            layer = owners.get(id(param))
            yield name, (param.data if layer is None else _merged_copy(layer, param))


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``exact_push``; its line where it changed something or kept TRL's."""
    line = exact_push(trainer)
    return [line] if line else []


def exact_push(trainer: Any) -> str | None:
    """Put the exact push on this trainer's engine; a line for the log (None: nothing to do)."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None:
        return None
    reason = why_not(generation)
    if reason == NOT_PEFT:
        return None
    if reason is not None:
        return f"LoRA weight push: TRL's merge/unmerge kept ({reason}); the bf16 base may drift"
    generation._iter_named_params = lambda: exact_walk(generation)
    return NOTE
