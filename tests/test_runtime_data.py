"""Dataset loading and the prompt-column check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.runtime.data import DatasetError, load_prompts, validate_columns


def test_builtin_digits_is_deterministic() -> None:
    a = load_prompts({"name": "builtin:digits"})
    b = load_prompts({"name": "builtin:digits", "prompt_column": "prompt"})
    assert len(a) == 400 and a["prompt"] == b["prompt"]
    assert a[0]["prompt"].startswith("Count on: ")
    assert "answer" in load_prompts({"name": "builtin:sums"}).column_names


def test_unknown_builtin() -> None:
    with pytest.raises(DatasetError, match="builtin:digits"):
        load_prompts({"name": "builtin:nope"})


def test_missing_prompt_column_names_columns(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{i}", "id": i}) + "\n" for i in range(3)))
    with pytest.raises(DatasetError) as info:
        load_prompts({"name": str(path), "prompt_column": "prompt"})
    assert "no prompt column 'prompt'" in str(info.value)
    assert "columns found: question, id" in str(info.value)


def test_local_files_and_column_rename(tmp_path: Path) -> None:
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps({"question": f"q{i}"}) + "\n" for i in range(3)))
    ds = load_prompts({"name": str(jsonl), "prompt_column": "question"})
    assert ds["prompt"] == ["q0", "q1", "q2"]
    csv = tmp_path / "d.csv"
    csv.write_text("prompt,answer\nhello,1\nbye,2\n")
    assert load_prompts({"name": str(csv)})["prompt"] == ["hello", "bye"]


def test_missing_file_and_validate() -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_prompts({"name": "/nonexistent/d.jsonl"})
    validate_columns(["prompt"], "prompt", "x")
    with pytest.raises(DatasetError, match=r"columns found: \(none\)"):
        validate_columns([], "prompt", "x")
