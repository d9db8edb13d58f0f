"""Prompt datasets: built-in ones generated in code, local files (JSONL, JSON, CSV, Parquet, a
``save_to_disk`` folder), or hub names with a config and a split (from the cache offline).

Built-ins need no network and are the same on every rank and every restart (fixed seed), so a
resumed run sees exactly the prompts an uninterrupted one would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.shared.setup_failure import exception_line

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
# Files ``datasets.save_to_disk`` writes: a DatasetDict's, then a Dataset's.
SAVED_MARKERS = ("dataset_dict.json", "state.json")


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


def validate_columns(columns: list[str], prompt_column: str, name: str,
                     solution_column: str = "") -> None:
    """Raise a DatasetError naming the missing column and the columns that exist."""
    for role, column in (("prompt", prompt_column), ("solution", solution_column)):
        if column and column not in columns:
            raise DatasetError(
                f"dataset {name!r} has no {role} column {column!r}; "
                f"columns found: {', '.join(columns) or '(none)'}"
            )


def _builtin(name: str) -> Any:
    import datasets  # here: the module imports without datasets

    key = name.split(":", 1)[1]
    if key not in BUILTIN:
        raise DatasetError(
            f"unknown built-in dataset {name!r}; known: "
            + ", ".join(f"builtin:{k}" for k in sorted(BUILTIN))
        )
    return datasets.Dataset.from_list(BUILTIN[key]())


def _from_disk(path: Path, split: str) -> Any:
    """A folder written by ``save_to_disk``: a Dataset, or a DatasetDict of which ``split``."""
    import datasets  # here: the module imports without datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DatasetError(f"dataset {str(path)!r} has no split {split!r}; splits: "
                               f"{', '.join(loaded) or '(none)'} (set dataset_split)")
        return loaded[split]
    return loaded


def _local(path: Path, config: str, split: str) -> Any:
    """A JSONL/JSON/CSV/Parquet file, a save_to_disk folder, or a folder of data files."""
    import datasets  # here: the module imports without datasets

    if path.is_file():
        if path.suffix not in LOCAL_FORMATS:
            raise DatasetError(f"dataset file {path} is not one of "
                               f"{', '.join(sorted(LOCAL_FORMATS))}")
        try:
            return datasets.load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path),
                                         split="train")
        except Exception as exc:  # DatasetGenerationError, ArrowInvalid, pandas' ParserError
            # datasets' own message says only "An error occurred while generating the dataset":
            # its cause (pyarrow's, pandas') names the row or line where it has one.
            cause = exc.__cause__ or exc.__context__ or exc
            raise DatasetError(f"dataset file {path} does not load: "
                               f"{exception_line(cause)}") from exc
    if any((path / marker).exists() for marker in SAVED_MARKERS):
        return _from_disk(path, split)
    return _hub(str(path), config, split)  # a folder of data files (or a hub-style snapshot)


def _hub(name: str, config: str, split: str) -> Any:
    """A hub dataset (read from the Hugging Face cache when the nodes run offline)."""
    import datasets  # here: the module imports without datasets

    try:
        return datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # any hub, cache or network failure gets the same hint
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(
            f"could not load dataset {name!r}" + (f" config {config!r}" if config else "")
            + f" split {split!r}: {first} (nodes without internet read hub datasets from the "
            "shared Hugging Face cache: stage it first, or give a local file)"
        ) from exc


def load_prompts(spec: Mapping[str, Any]) -> Any:
    """A `datasets.Dataset` with a 'prompt' column (run.json's dataset block), every other
    column kept: TRL passes them to the rewards by name."""
    name = str(spec["name"])
    prompt_column = str(spec.get("prompt_column") or "prompt")
    split = str(spec.get("split") or "train")
    config = str(spec.get("config") or "")
    if name.startswith("builtin:"):
        ds = _builtin(name)
    elif Path(name).suffix in LOCAL_FORMATS or Path(name).exists():
        path = Path(name)
        if not path.exists():
            raise DatasetError(f"dataset file {path} does not exist")
        ds = _local(path, config, split)
    else:
        ds = _hub(name, config, split)
    validate_columns(list(ds.column_names), prompt_column, name,
                     str(spec.get("solution_column") or ""))
    if len(ds) == 0:
        raise DatasetError(f"dataset {name!r} is empty")
    if prompt_column != "prompt":
        if "prompt" in ds.column_names:
            ds = ds.remove_columns("prompt")
        ds = ds.rename_column(prompt_column, "prompt")
    return conversational(ds, str(spec.get("system_prompt") or ""))


def as_messages(prompt: Any, system_prompt: str) -> Any:
    """One prompt as TRL should see it: a plain string stays one unless there is a system
    prompt; a list of messages gets the system prompt first unless it already has one."""
    if isinstance(prompt, str):
        if not system_prompt:
            return prompt
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]
    messages = [dict(m) for m in prompt]
    if system_prompt and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def conversational(ds: Any, system_prompt: str) -> Any:
    """Prompts as [system, user] chats when there is a system prompt (TRL then renders them with
    the model's chat template); prompts that are already message lists pass as they are."""
    if not system_prompt:
        return ds
    return ds.map(lambda row: {"prompt": as_messages(row["prompt"], system_prompt)})


def check_solution_column(columns: list[str], solution_column: str, rewards: Sequence[str],
                          needs_solution: Sequence[str], name: str) -> None:
    """Rewards that compare with a reference answer need its column; refuse before the model
    loads, naming the columns that exist."""
    users = [r for r in rewards if r in needs_solution]
    column = solution_column or "solution"
    if users and column not in columns:
        raise DatasetError(
            f"{', '.join(users)} compares with the reference answer, but dataset {name!r} has no "
            f"column {column!r}; columns found: {', '.join(columns)} (set solution_column)")


def longest_prompt_tokens(dataset: Any, tokenizer: Any) -> int:
    """Tokens of the longest prompt as the trainer will send it: plain text through the tokenizer
    (TRL's ``processing_class(text=...)``), messages rendered with the chat template and the
    generation prompt (TRL's ``apply_chat_template(add_generation_prompt=True)``)."""
    prompts = dataset["prompt"]
    texts = [p for p in prompts if isinstance(p, str)]  # one batched call: start-up stays short
    longest = max((len(ids) for ids in tokenizer(texts)["input_ids"]), default=0) if texts else 0
    chats = [p for p in prompts if not isinstance(p, str)]
    if chats:
        if not getattr(tokenizer, "chat_template", None):
            raise DatasetError("the prompts are chats (a system prompt or message lists) but the "
                               "model's tokenizer has no chat template")
        rendered = tokenizer.apply_chat_template(chats, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(list(rendered), add_special_tokens=False)["input_ids"]
        longest = max(longest, max(len(i) for i in ids))
    return longest


def check_prompt_bound(longest: int, bound: int | None, name: str) -> None:
    """The plan sized vLLM's max_model_len for prompts of ``bound`` tokens; refuse longer ones."""
    if bound and longest > bound:
        raise DatasetError(
            f"dataset {name!r} has a prompt of {longest} tokens, above max_prompt_length {bound} "
            f"that the plan sized vLLM for; resubmit with --set max_prompt_length={longest}"
        )
