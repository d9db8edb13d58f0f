"""Write a checkpoint as a Hugging Face model folder and check it:
``python -m hpc_grpo.runtime.posttrain.export ANSWER.json < request.json``.

The launcher (hpc_grpo/export/) picked the checkpoint, its layout and an empty temporary folder
beside the target; it renames that folder into place only after this exits 0 with a passed
check, and removes it otherwise. Request keys: ``checkpoint``, ``layout`` (full, zero, lora),
``base`` (LoRA: the base model folder), ``target`` (the temporary folder), ``dtype``
(float32, bfloat16), ``adapter`` (LoRA: write the adapter instead of merging it). The answer
(JSON, written to ANSWER.json so that library output on stdout cannot garble it) holds ``ok``,
``error`` (one line), ``check`` (check.CheckResult.to_dict) and ``notes``.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.child_answer import serve
from hpc_grpo.runtime.posttrain import check, weights


def _tokenizer(checkpoint: str, base: str) -> Any:
    """The tokenizer the ranks saved with the checkpoint (with its chat template), else the
    base model's (an adapter checkpoint written without one)."""
    from hpc_grpo.runtime.models.tiny import load_tokenizer

    has = any((Path(checkpoint) / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))
    return load_tokenizer(checkpoint if has or not base else base)


def write(request: dict[str, Any]) -> list[str]:
    """The model and tokenizer into request["target"]; notes for the user."""
    import torch

    layout, target = request["layout"], request["target"]
    adapter = bool(request.get("adapter"))
    notes: list[str] = []
    model = weights.load(layout, request["checkpoint"], request.get("base", ""))
    if layout == "lora" and not adapter:
        model = model.merge_and_unload()  # peft: the adapter folded into the base weights
    if adapter:
        notes.append("adapter written in the dtype it trained in; load it on the base model "
                     f"{request.get('base')} with peft")
    else:
        model = model.to(dtype=getattr(torch, request["dtype"]))
        model.config.use_cache = True  # training turned the KV cache off; inference wants it
    model.save_pretrained(target)
    del model
    gc.collect()
    tokenizer = _tokenizer(request["checkpoint"], request.get("base", ""))
    if not getattr(tokenizer, "chat_template", None):
        notes.append("the tokenizer has no chat template: none is exported")
    tokenizer.save_pretrained(target)
    return notes


def verify(request: dict[str, Any]) -> check.CheckResult:
    """The folder as transformers (and peft, for an adapter) loads it, against the checkpoint's
    own model loaded afresh from the checkpoint."""
    layout, target = request["layout"], request["target"]
    reference = weights.load(layout, request["checkpoint"], request.get("base", ""))
    if request.get("adapter"):
        exported = weights.load_lora(request["base"], target)
        dtype = "float32"
    else:
        exported = weights.load_full(target).float()  # upcast: see check.py
        dtype = request["dtype"]
    tokenizer = _tokenizer(target, "")
    return check.compare(reference, exported, tokenizer, dtype)


def run(request: dict[str, Any]) -> dict[str, Any]:
    notes = write(request)
    result = verify(request)
    answer: dict[str, Any] = {"ok": result.passed, "check": result.to_dict(), "notes": notes}
    if not result.passed:
        answer["error"] = (f"the exported model's log-probabilities differ from the checkpoint's by "
                           f"up to {result.max_abs_diff:.3g}, above the tolerance "
                           f"{result.tolerance:g}")
    return answer


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.posttrain.export ANSWER.json < request.json` (runtime/child_answer.py)."""
    return serve("hpc_grpo.runtime.posttrain.export", run, argv)

if __name__ == "__main__":
    sys.exit(main())
