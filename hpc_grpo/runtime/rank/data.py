"""Prompt datasets: built-in ones generated in code, local files, or hub names.

Built-ins need no network and are the same on every rank and every restart (fixed seed), so a
resumed run sees exactly the prompts an uninterrupted one would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv"}


class DatasetError(ValueError):
    """A dataset that cannot be used for GRPO: not found, or without the prompt column."""


def _digits(n: int = 400, seed: int = 1234) -> list[dict[str, str]]:
    """Short counting prompts: 'Count on: 17 18 19'."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        start = rng.randint(0, 90)
        seq = " ".join(str(start + i) for i in range(rng.randint(2, 5)))
        rows.append({"prompt": f"Count on: {seq}"})
    return rows


def _sums(n: int = 400, seed: int = 4321) -> list[dict[str, str]]:
    """Short arithmetic questions with the answer kept for a correctness reward."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        rows.append({"prompt": f"What is {a} + {b}?", "answer": str(a + b)})
    return rows


BUILTIN: dict[str, Callable[[], list[dict[str, str]]]] = {"digits": _digits, "sums": _sums}


def validate_columns(columns: list[str], prompt_column: str, name: str) -> None:
    """Raise a DatasetError naming the missing column and the columns that exist."""
    if prompt_column not in columns:
        raise DatasetError(
            f"dataset {name!r} has no prompt column {prompt_column!r}; "
            f"columns found: {', '.join(columns) or '(none)'}"
        )


def load_prompts(spec: Mapping[str, Any]) -> Any:
    """A `datasets.Dataset` with a 'prompt' column, from run.json's dataset block."""
    import datasets

    name = str(spec["name"])
    prompt_column = str(spec.get("prompt_column") or "prompt")
    split = str(spec.get("split") or "train")
    if name.startswith("builtin:"):
        key = name.split(":", 1)[1]
        if key not in BUILTIN:
            raise DatasetError(
                f"unknown built-in dataset {name!r}; known: "
                + ", ".join(f"builtin:{k}" for k in sorted(BUILTIN))
            )
        ds = datasets.Dataset.from_list(BUILTIN[key]())
    elif Path(name).suffix in LOCAL_FORMATS:
        path = Path(name)
        if not path.is_file():
            raise DatasetError(f"dataset file {path} does not exist")
        ds = datasets.load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train")
    else:
        try:
            ds = datasets.load_dataset(name, split=split)
        except Exception as exc:  # any hub or network failure gets the same hint
            raise DatasetError(
                f"could not load dataset {name!r} split {split!r}: {exc} "
                "(hub names need a reachable hub from the compute nodes; use a local file)"
            ) from exc
    validate_columns(list(ds.column_names), prompt_column, name)
    if len(ds) == 0:
        raise DatasetError(f"dataset {name!r} is empty")
    if prompt_column != "prompt":
        if "prompt" in ds.column_names:
            ds = ds.remove_columns("prompt")
        ds = ds.rename_column(prompt_column, "prompt")
    return ds


def longest_prompt_tokens(dataset: Any, tokenizer: Any) -> int:
    """Tokens of the longest prompt as the trainer will send it (chat template for messages)."""
    prompts = dataset["prompt"]
    texts = [p for p in prompts if isinstance(p, str)]  # one batched call: start-up stays short
    longest = max((len(ids) for ids in tokenizer(texts)["input_ids"]), default=0) if texts else 0
    for prompt in prompts:
        if not isinstance(prompt, str):  # conversational: a list of {"role", "content"} messages
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, Mapping) else ids
            longest = max(longest, len(ids))
    return longest


def check_prompt_bound(longest: int, bound: int | None, name: str) -> None:
    """The plan sized vLLM's max_model_len for prompts of ``bound`` tokens; refuse longer ones."""
    if bound and longest > bound:
        raise DatasetError(
            f"dataset {name!r} has a prompt of {longest} tokens, above max_prompt_length {bound} "
            f"that the plan sized vLLM for; resubmit with --set max_prompt_length={longest}"
        )
