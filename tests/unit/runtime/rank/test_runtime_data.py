"""Dataset loading and the prompt-column check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo.runtime.rank.data.dataset import DatasetError, load_prompts, validate_columns


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


def test_builtin_prompt_bounds_hold_for_the_builtin_tokenizer() -> None:
    from hpc_grpo.planner.job import BUILTIN_PROMPT_TOKENS
    from hpc_grpo.runtime.models.tiny import build_tokenizer
    from hpc_grpo.runtime.rank.data.dataset import longest_prompt_tokens

    tokenizer = build_tokenizer()
    for name, bound in BUILTIN_PROMPT_TOKENS.items():
        prompts = load_prompts({"name": name})
        longest = longest_prompt_tokens(prompts, tokenizer)
        assert 0 < longest <= bound, name
        # the bound holds for any byte-level tokenizer: one token per byte at most, plus BOS
        assert max(len(p.encode()) for p in prompts["prompt"]) + 1 <= bound, name


def test_a_prompt_longer_than_the_plan_allows_is_refused_with_the_value_to_use(
        tmp_path: Path) -> None:
    from hpc_grpo.runtime.models.tiny import build_tokenizer
    from hpc_grpo.runtime.rank.data.dataset import check_prompt_bound, longest_prompt_tokens

    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": "Count on: " + " ".join(map(str, range(200)))}) + "\n"
                    + json.dumps({"prompt": "short"}) + "\n")
    prompts = load_prompts({"name": str(path)})
    longest = longest_prompt_tokens(prompts, build_tokenizer())
    assert longest > 100
    check_prompt_bound(longest, longest, str(path))  # exactly at the bound is fine
    check_prompt_bound(longest, None, str(path))  # no bound recorded (older run.json)
    with pytest.raises(DatasetError, match=f"--set max_prompt_length={longest}"):
        check_prompt_bound(longest, 64, str(path))
