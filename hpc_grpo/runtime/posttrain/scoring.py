"""Generate for a dataset's prompts and score the completions with the training rewards:
``python -m hpc_grpo.runtime.posttrain.scoring ANSWER.json < request.json``.

Two engines, as TRL's GRPOTrainer has (``engine``: "auto" takes vLLM where
``engine.unavailable()`` is "", else transformers; "vllm" where it cannot run is a one-line
error). Both sample at the run's temperature/top_p/top_k/min_p/repetition_penalty from the same
prompt token ids (``render``, then the tokenizer without special tokens), keep everything up to
the first EOS (the tokenizer's or the generation config's) and return ``num_samples``
completions per prompt, prompt-major:

* transformers: GRPOTrainer._generate_single_turn without vLLM (``model.generate`` over
  left-padded batches of ``batch_size`` prompts).
* vLLM: its colocate path (``LLM.generate`` on ``{"prompt_token_ids": ...}`` with TRL's
  ``SamplingParams`` arguments, ``n`` = num_samples, ``max_tokens`` = max_new_tokens), one
  in-process engine (engine.open_engine, dtype "auto" as TRL's, ``tensor_parallel`` GPUs at
  most those of this node). Each prompt's SamplingParams gets its own seed (``seed + index *
  n``; vLLM adds 0..n-1 for the samples): every completion has its own random stream, so
  prompts do not share sampling noise (the launcher's interval takes them as independent) and
  the result does not depend on how vLLM batches. A LoRA adapter runs through vLLM's LoRA
  (``enable_lora``, ``max_lora_rank`` from adapter_config.json's ``r``, one ``LoRARequest``):
  the unmerged adapter is what the run saved, vLLM applies it as peft does, and the GPU then
  serves LoRA runs too. Adapters vLLM's LoRA cannot load (``modules_to_save``, a rank above
  its largest) go through transformers under "auto", with the reason in the answer.

Completions are decoded without special tokens and passed to the rewards as TRL passes them (a
string, or one assistant message for chat prompts), with every other dataset column by name.
The launcher (hpc_grpo/export/evaluate.py) turns the per-prompt rewards into means and
confidence intervals.

Request keys: ``model`` (a folder transformers loads, or the LoRA base), ``adapter`` (a peft
adapter folder, or ""), ``dataset`` (run.json's dataset block), ``reward_funcs``,
``reward_kwargs``, ``reward_weights``, ``limit`` (prompts), ``num_samples`` (completions per
prompt), ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``, ``min_p``,
``repetition_penalty``, ``seed``, ``batch_size``, ``engine``, ``tensor_parallel``. The answer
names the ``engine`` that generated, and ``engine_note`` why not vLLM ("" when it did).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import DatasetBlock
from hpc_grpo.runtime.child_answer import serve
from hpc_grpo.runtime.models.tiny import load_tokenizer
from hpc_grpo.runtime.posttrain import engine, weights
from hpc_grpo.runtime.rank.data import job_inputs

ENGINES = ("auto", "vllm", "transformers")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's MaxLoRARanks
MODEL_LEN_STEP = 256  # max_model_len is rounded up to a multiple of this


def lora_rank(adapter: str) -> tuple[int, str]:
    """vLLM's ``max_lora_rank`` for this adapter (the smallest it allows at or above the
    adapter's rank), or 0 and why vLLM's LoRA cannot apply it as peft does. vLLM 0.26's
    PEFTHelper reads one ``r`` and ``lora_alpha`` for every module (no ``rank_pattern`` or
    ``alpha_pattern``: such an adapter would generate from another model without an error) and
    refuses DoRA and trained biases inside ``generate``."""
    config = json.loads((Path(adapter) / "adapter_config.json").read_text())
    if config.get("modules_to_save"):
        return 0, "the adapter saves whole modules (modules_to_save), which vLLM's LoRA does not load"
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        return 0, "the adapter has per-module ranks or alphas, which vLLM's LoRA applies as one"
    if config.get("use_dora"):
        return 0, "a DoRA adapter, which vLLM's LoRA does not load"
    if config.get("bias", "none") != "none":
        return 0, f"the adapter trains biases (bias={config.get('bias')}), which vLLM's LoRA does not load"
    rank = int(config.get("r") or 0)
    fit = next((k for k in VLLM_LORA_RANKS if k >= rank), 0)
    return (fit, "") if fit else (0, f"LoRA rank {rank} is above vLLM's largest "
                                     f"({VLLM_LORA_RANKS[-1]})")


def choose(asked: str, adapter: str, layout: str = "") -> tuple[str, str, int]:
    """The engine that generates, the note (why not vLLM under "auto"; the error where none
    can: engine ""), and vLLM's max_lora_rank for an adapter. DeepSpeed's shards (``layout``
    "zero") are read into a transformers model: vLLM loads model folders only."""
    if asked not in ENGINES:
        return "", f"unknown engine {asked!r} (one of {', '.join(ENGINES)})", 0
    if asked == "transformers":
        return "transformers", "", 0
    if layout == "zero":
        why = ("the checkpoint holds DeepSpeed's shards only, which vLLM cannot load; "
               "hpc-grpo export writes a folder it reads")
        return ("", f"engine vllm cannot run: {why}", 0) if asked == "vllm" else \
            ("transformers", f"vLLM not used: {why}", 0)
    why, rank = engine.unavailable(), 0
    if not why and adapter:
        rank, why = lora_rank(adapter)
    if not why:
        return "vllm", "", rank
    if asked == "vllm":
        return "", f"engine vllm cannot run: {why}", 0
    return "transformers", f"vLLM not used: {why}", 0


def _tokenizer(request: dict[str, Any]) -> Any:
    """The adapter's tokenizer where it saved one, else the model's; left padding."""
    adapter = request.get("adapter") or ""
    folder = adapter if adapter and (Path(adapter) / "tokenizer.json").exists() else request["model"]
    tokenizer = load_tokenizer(folder)
    tokenizer.padding_side = "left"
    return tokenizer


def _eos_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """TRL's stop tokens: the tokenizer's EOS and the model's generation config's."""
    ids = getattr(generation_config, "eos_token_id", None)
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return [tokenizer.eos_token_id, *ids] if tokenizer.eos_token_id not in ids else ids


def render(prompt: Any, tokenizer: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))


def cut(row: Sequence[int], eos: Sequence[int]) -> list[int]:
    """A completion up to and with its first EOS (all of it when there is none)."""
    end = next((i for i, t in enumerate(row) if t in eos), len(row) - 1)
    return list(row[:end + 1])


def generate(model: Any, tokenizer: Any, prompts: Sequence[Any], request: dict[str, Any]
             ) -> list[list[int]]:
    """transformers: ``num_samples`` completions per prompt (prompt-major), each cut after its
    first EOS."""
    import torch  # here: the module imports without torch
    from transformers import GenerationConfig  # here: the module imports without the training stack

    eos = _eos_ids(model.generation_config, tokenizer)
    config = GenerationConfig(
        max_new_tokens=int(request["max_new_tokens"]), do_sample=True,
        temperature=float(request["temperature"]), top_p=float(request.get("top_p", 1.0)),
        top_k=request.get("top_k") or None, min_p=request.get("min_p") or None,
        repetition_penalty=float(request.get("repetition_penalty", 1.0)),
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
        num_return_sequences=int(request["num_samples"]))
    texts = [render(p, tokenizer) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    return [cut(row, eos) for row in out[:, batch["input_ids"].shape[1]:].tolist()]


def sampling(request: dict[str, Any], first: int, count: int) -> list[dict[str, Any]]:
    """vLLM: the SamplingParams arguments of prompts ``first`` .. ``first + count - 1``, TRL's
    colocate ones (top_k 0 is none, vLLM's and TRL's convention), each with its own seed."""
    n, seed = int(request["num_samples"]), int(request.get("seed", 0))
    base = {"n": n, "temperature": float(request["temperature"]),
            "top_p": float(request.get("top_p", 1.0)), "top_k": max(0, int(request.get("top_k") or 0)),
            "min_p": float(request.get("min_p") or 0.0),
            "repetition_penalty": float(request.get("repetition_penalty", 1.0)),
            "max_tokens": int(request["max_new_tokens"])}
    return [base | {"seed": seed + (first + i) * n} for i in range(count)]


def prompt_ids(tokenizer: Any, prompts: Sequence[Any]) -> list[list[int]]:
    """Each prompt's token ids as the transformers path feeds them (without its padding)."""
    texts = [render(p, tokenizer) for p in prompts]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def model_len(folder: str, longest: int, max_new_tokens: int) -> int:
    """vLLM's max_model_len: the longest prompt and its completion, rounded up, within the
    model's positions where its config.json names them."""
    need = longest + max_new_tokens
    rounded = -(-need // MODEL_LEN_STEP) * MODEL_LEN_STEP
    try:
        positions = int(json.loads((Path(folder) / "config.json").read_text())
                        ["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return rounded
    return max(need, min(rounded, positions))


def _gpus(tensor_parallel: int) -> int:
    """The plan's TP, or its largest divisor this node has GPUs for."""
    import torch  # here: the module imports without torch

    have = torch.cuda.device_count()
    return max(d for d in range(1, tensor_parallel + 1) if tensor_parallel % d == 0 and d <= max(have, 1))


def _generation_config(folder: str) -> Any:
    from transformers import GenerationConfig  # here: the module imports without the training stack

    try:
        return GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError):
        return GenerationConfig()


def vllm_completions(request: dict[str, Any], rows: Sequence[dict[str, Any]], tokenizer: Any,
                     rank: int, tensor_parallel: int) -> list[list[int]]:
    """Every prompt's completions through one vLLM engine of ``tensor_parallel`` GPUs
    (prompt-major, cut after the first EOS), the adapter through vLLM's LoRA (``rank``: its
    max_lora_rank)."""
    from vllm import SamplingParams  # here: only where vLLM runs

    ids = prompt_ids(tokenizer, [r["prompt"] for r in rows])
    eos = _eos_ids(_generation_config(request["model"]), tokenizer)
    adapter = request.get("adapter") or ""
    lora: Any = None
    extra: dict[str, Any] = {}
    if adapter:
        from vllm.lora.request import LoRARequest  # here: only where vLLM runs

        lora, extra = LoRARequest("adapter", 1, adapter), {"enable_lora": True, "max_lora_rank": rank}
    length = model_len(request["model"], max(map(len, ids)), int(request["max_new_tokens"]))
    params = [SamplingParams(**kw) for kw in sampling(request, 0, len(ids))]
    llm = engine.open_engine(request["model"], max_model_len=length, dtype="auto",
                             tensor_parallel=tensor_parallel, seed=int(request.get("seed", 0)),
                             **extra)
    outputs = llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False,
                           lora_request=lora)
    return [cut(list(done.token_ids), eos) for out in outputs for done in out.outputs]


def transformers_completions(request: dict[str, Any], rows: Sequence[dict[str, Any]],
                             tokenizer: Any) -> list[list[int]]:
    """Every prompt's completions through transformers, ``batch_size`` prompts at a time."""
    adapter = request.get("adapter") or ""
    if adapter:
        model = weights.load_lora(request["model"], adapter)
    elif request.get("layout") == "zero":  # the fp32 master weights, as the export reads them
        model = weights.load_zero(request["model"])
    else:
        model = weights.load_full(request["model"])
    size = int(request.get("batch_size", 16))
    return [ids for start in range(0, len(rows), size)
            for ids in generate(model, tokenizer, [r["prompt"] for r in rows[start:start + size]],
                                request)]


def score(rewards: Sequence[Callable[..., Any]], rows: Sequence[dict[str, Any]], texts: list[str],
          ids: list[list[int]], samples: int) -> list[list[float | None]]:
    """Each reward's value for each completion (None where a reward skips one), as TRL calls
    them: prompts and completions repeated per sample, every other column by name."""
    from transformers import TrainerState  # here: the module imports without the training stack

    prompts = [row["prompt"] for row in rows for _ in range(samples)]
    completions: list[Any] = [t if isinstance(p, str) else [{"role": "assistant", "content": t}]
                              for p, t in zip(prompts, texts, strict=True)]
    columns = {k: [row[k] for row in rows for _ in range(samples)]
               for k in rows[0] if k != "prompt"}
    out = []
    for func in rewards:
        values = func(prompts=prompts, completions=completions, completion_ids=ids,
                      trainer_state=TrainerState(), log_extra=_no_log, log_metric=_no_log,
                      **columns)
        out.append([None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
                    for v in values])
    return out


def _no_log(*_: Any, **__: Any) -> None:
    """Stands in for TRL's log_extra / log_metric outside a trainer."""


def run(request: dict[str, Any]) -> dict[str, Any]:
    import torch  # here: the module imports without torch

    name, note, rank = choose(str(request.get("engine") or "auto"), request.get("adapter") or "",
                              str(request.get("layout") or ""))
    if not name:
        return {"ok": False, "error": note}
    torch.manual_seed(int(request.get("seed", 0)))
    specs = list(request["reward_funcs"])
    block = DatasetBlock(**request["dataset"])
    rewards = job_inputs.load_rewards(specs, request.get("reward_kwargs") or {},
                                      request.get("reward_weights") or (), block.solution_column)
    dataset = job_inputs.load_dataset(block, specs)
    rows = [dict(dataset[i]) for i in range(min(int(request["limit"]), len(dataset)))]
    tokenizer = _tokenizer(request)
    tp = _gpus(int(request.get("tensor_parallel") or 1)) if name == "vllm" else 1
    ids = (vllm_completions(request, rows, tokenizer, rank, tp) if name == "vllm"
           else transformers_completions(request, rows, tokenizer))
    samples, size = int(request["num_samples"]), int(request.get("batch_size", 16))
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    per_reward: list[list[float | None]] = [[] for _ in specs]
    for start in range(0, len(rows), size):
        span = slice(start * samples, (start + size) * samples)
        for i, values in enumerate(score(rewards, rows[start:start + size], texts[span], ids[span],
                                         samples)):
            per_reward[i].extend(values)
    return {"ok": True, "prompts": len(rows), "num_samples": samples, "rewards": per_reward,
            "reward_names": specs, "engine": name, "engine_note": note,
            "tensor_parallel": tp,
            "example": {"prompt": render(rows[0]["prompt"], tokenizer), "completion": texts[0]},
            "dataset": dataclasses.asdict(block)}


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.posttrain.scoring ANSWER.json < request.json`."""
    return serve("hpc_grpo.runtime.posttrain.scoring", run, argv)

if __name__ == "__main__":
    sys.exit(main())
