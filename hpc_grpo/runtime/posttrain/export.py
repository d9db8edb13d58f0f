"""Write a checkpoint as a Hugging Face model folder and check it:
``python -m hpc_grpo.runtime.posttrain.export ANSWER.json < request.json``.

The launcher (hpc_grpo/export/) picked the checkpoint, its layout and an empty temporary folder
beside the target; it renames that folder into place only after this exits 0 with a passed
check, and removes it otherwise. Request keys: ``checkpoint``, ``layout`` (full, zero, lora),
``base`` (LoRA: the base model folder), ``target`` (the temporary folder), ``dtype``
(float32, bfloat16), ``adapter`` (LoRA: write the adapter instead of merging it),
``num_params`` (the plan's count of the parameters written: what vLLM would hold). The answer
(JSON, written to ANSWER.json so that library output on stdout cannot garble it) holds ``ok``,
``error`` (one line), ``check`` (check.CheckResult.to_dict, with ``vllm``: vLLM's reading
of the folder judged the same way, or ``{"skipped": why}``) and ``notes``. Optional request
keys: ``vllm_check`` ("auto": where vLLM and a GPU are here; "off"), ``tensor_parallel``.
"""

from __future__ import annotations

import gc
import sys
import traceback
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.child_answer import serve
from hpc_grpo.runtime.models.tiny import load_tokenizer
from hpc_grpo.runtime.posttrain import check, engine, vllm_check, weights
from hpc_grpo.runtime.shared.setup_failure import exception_line


def _tokenizer(checkpoint: str, base: str) -> Any:
    """The tokenizer the ranks saved with the checkpoint (with its chat template), else the
    base model's (an adapter checkpoint written without one)."""
    has = any((Path(checkpoint) / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))
    return load_tokenizer(checkpoint if has or not base else base)


def write(request: dict[str, Any]) -> list[str]:
    """The model and tokenizer into request["target"]; notes for the user."""
    import torch  # here: the module imports without torch

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


def verify(request: dict[str, Any]) -> tuple[check.CheckResult, dict[str, Any], dict[str, Any]]:
    """The folder as transformers (and peft, for an adapter) loads it, against the checkpoint's
    own model loaded afresh from the checkpoint and rounded as written (check.py); then as vLLM
    loads it, where this process can run vLLM. Returns transformers' result, vLLM's (or why it
    was skipped) and the rounding: what it does alone, and for a merged LoRA the merge in fp32
    judged against the unmerged model that trained (check.merge)."""
    import torch  # here: the module imports without torch

    layout, target = request["layout"], request["target"]
    adapter = bool(request.get("adapter"))
    merged = layout == "lora" and not adapter
    dtype = "float32" if adapter else request["dtype"]  # an adapter keeps its own dtype
    # fp32 means fp32 on the GPU too: a library that turned TF32 on would blur the comparison
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tokenizer = _tokenizer(target, "")
    model = weights.load(layout, request["checkpoint"], request.get("base", ""))
    device = reading_device(sum(p.numel() for p in model.parameters()))
    exact = check.reference(model.to(device), tokenizer)
    rounding: dict[str, Any] = {}
    if merged:  # as write() merges: on the CPU, in fp32, then rounds
        model = model.to("cpu").merge_and_unload().to(device)
        in_fp32 = check.reference(model, tokenizer)
        rounding["merge"] = check.merge(exact, in_fp32).to_dict()
    else:
        in_fp32 = exact
    ref = check.reference(check.rounded(model, dtype), tokenizer) if dtype != "float32" else in_fp32
    rounding.update(check.rounding(in_fp32, ref, dtype))
    del model
    _free()
    exported = (weights.load_lora(request["base"], target) if adapter
                else weights.load_full(target).float())  # upcast: see check.py
    result = check.compare_model(ref, exported.to(device), tokenizer)
    del exported
    _free()
    return result, _vllm(request, ref), rounding


def reading_device(num_params: int) -> str:
    """The GPU where it holds an fp32 copy of the model with room to spare (the readings hold
    one model at a time), else the CPU: a 32B model is 128 GB in fp32."""
    import torch  # here: the module imports without torch

    if not torch.cuda.is_available():
        return "cpu"
    free, _ = torch.cuda.mem_get_info()
    return "cuda" if free > 1.2 * 4 * num_params else "cpu"


def _free() -> None:
    """Give a model's memory back (host and GPU) before the next one loads."""
    import torch  # here: the module imports without torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _vllm(request: dict[str, Any], ref: check.Reference) -> dict[str, Any]:
    """vLLM's reading of the folder, judged; {"skipped": why} where it does not run. A vLLM that
    cannot start or load the folder here (too little free GPU memory, an old GPU, a model that
    needs more GPUs) is said, not held against a folder transformers has just checked."""
    if request.get("adapter"):
        return {"skipped": "an adapter folder (vLLM serves it on the base model with enable_lora)"}
    if request.get("vllm_check", "auto") == "off":
        return {"skipped": "turned off"}
    why = engine.unavailable(weights_bytes=2 * int(request.get("num_params") or 0))
    if why:
        return {"skipped": why}
    try:
        return vllm_check.run(ref, request["target"],
                              tensor_parallel=int(request.get("tensor_parallel", 1))).to_dict()
    except Exception as exc:  # noqa: BLE001 - vLLM's own errors are many; the line says which
        traceback.print_exc()
        return {"skipped": f"vLLM could not read the folder: {exception_line(exc)}"}


def run(request: dict[str, Any]) -> dict[str, Any]:
    notes = write(request)
    result, by_vllm, rounding = verify(request)
    failed = [r for r in (result.to_dict(), by_vllm, rounding.get("merge", {}))
              if r.get("passed") is False]
    answer: dict[str, Any] = {"ok": not failed, "notes": notes,
                              "check": {**result.to_dict(), "vllm": by_vllm, "rounding": rounding}}
    if failed:
        answer["error"] = "; ".join(
            f"{r['engine']}: log-probabilities differ from the checkpoint's by up to "
            f"{r['max_abs_diff']:.3g} (mean {r['mean_abs_diff']:.3g}), above the tolerance "
            f"{r['tolerance']:g}" for r in failed)
    return answer


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.posttrain.export ANSWER.json < request.json` (runtime/child_answer.py)."""
    return serve("hpc_grpo.runtime.posttrain.export", run, argv)

if __name__ == "__main__":
    sys.exit(main())
