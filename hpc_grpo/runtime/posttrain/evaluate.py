"""Generate for a dataset's prompts and score the completions with the training rewards:
``python -m hpc_grpo.runtime.posttrain.evaluate ANSWER.json < request.json``.

Generation is TRL's transformers path (GRPOTrainer._generate_single_turn without vLLM): sampling
at the run's temperature/top_p/top_k, stop at the tokenizer's EOS or the model's, everything
after the first EOS dropped, completions decoded without special tokens and passed to the
rewards as TRL passes them (a string, or one assistant message for chat prompts), with every
other dataset column by name. The launcher (hpc_grpo/export/evaluate.py) turns the per-prompt
rewards into means and confidence intervals.

Request keys: ``model`` (a folder transformers loads, or the LoRA base), ``adapter`` (a peft
adapter folder, or ""), ``dataset`` (run.json's dataset block), ``reward_funcs``,
``reward_kwargs``, ``reward_weights``, ``limit`` (prompts), ``num_samples`` (completions per
prompt), ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``batch_size``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import DatasetBlock
from hpc_grpo.runtime.child_answer import serve
from hpc_grpo.runtime.posttrain import weights


def _model_and_tokenizer(request: dict[str, Any]) -> tuple[Any, Any]:
    from hpc_grpo.runtime.models.tiny import load_tokenizer

    adapter = request.get("adapter") or ""
    if adapter:
        model = weights.load_lora(request["model"], adapter)
        folder = adapter if (Path(adapter) / "tokenizer.json").exists() else request["model"]
    else:
        model = weights.load_full(request["model"])
        folder = request["model"]
    tokenizer = load_tokenizer(folder)
    tokenizer.padding_side = "left"
    return model, tokenizer


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """TRL's stop tokens: the tokenizer's EOS and the model's generation config's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return [tokenizer.eos_token_id, *ids] if tokenizer.eos_token_id not in ids else ids


def render(prompt: Any, tokenizer: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))


def generate(model: Any, tokenizer: Any, prompts: Sequence[Any], request: dict[str, Any]
             ) -> list[list[int]]:
    """``num_samples`` completions per prompt (prompt-major), each cut after its first EOS."""
    import torch
    from transformers import GenerationConfig

    eos = _eos_ids(model, tokenizer)
    config = GenerationConfig(
        max_new_tokens=int(request["max_new_tokens"]), do_sample=True,
        temperature=float(request["temperature"]), top_p=float(request.get("top_p", 1.0)),
        top_k=request.get("top_k") or None, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos, num_return_sequences=int(request["num_samples"]))
    texts = [render(p, tokenizer) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    completions = []
    for row in out[:, batch["input_ids"].shape[1]:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row) - 1)
        completions.append(row[:cut + 1])
    return completions


def score(rewards: Sequence[Callable[..., Any]], rows: Sequence[dict[str, Any]], texts: list[str],
          ids: list[list[int]], samples: int) -> list[list[float | None]]:
    """Each reward's value for each completion (None where a reward skips one), as TRL calls
    them: prompts and completions repeated per sample, every other column by name."""
    from transformers import TrainerState

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
    import torch

    from hpc_grpo.runtime.rank import job_inputs

    torch.manual_seed(int(request.get("seed", 0)))
    specs = list(request["reward_funcs"])
    block = DatasetBlock(**request["dataset"])
    rewards = job_inputs.load_rewards(specs, request.get("reward_kwargs") or {},
                                      request.get("reward_weights") or (), block.solution_column)
    dataset = job_inputs.load_dataset(block, specs)
    rows = [dict(dataset[i]) for i in range(min(int(request["limit"]), len(dataset)))]
    model, tokenizer = _model_and_tokenizer(request)
    samples, size = int(request["num_samples"]), int(request.get("batch_size", 16))
    per_reward: list[list[float | None]] = [[] for _ in specs]
    example = ""
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        ids = generate(model, tokenizer, [r["prompt"] for r in chunk], request)
        texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
        example = example or texts[0]
        for i, values in enumerate(score(rewards, chunk, texts, ids, samples)):
            per_reward[i].extend(values)
    return {"ok": True, "prompts": len(rows), "num_samples": samples, "rewards": per_reward,
            "reward_names": specs, "example": {"prompt": render(rows[0]["prompt"], tokenizer),
                                               "completion": example},
            "dataset": dataclasses.asdict(block)}


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.posttrain.evaluate ANSWER.json < request.json`."""
    return serve("hpc_grpo.runtime.posttrain.evaluate", run, argv)

if __name__ == "__main__":
    sys.exit(main())
