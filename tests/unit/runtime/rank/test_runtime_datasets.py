"""Datasets as they exist on clusters (#14): files of every format, save_to_disk folders, the
solution column, conversational prompts measured as TRL renders them, and LoRA settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import DatasetBlock, ModelBlock, PeftBlock
from hpc_grpo.runtime.rank.data.dataset import DatasetError, load_prompts, longest_prompt_tokens

ROWS = [{"problem": f"What is {i} over {i + 1}?", "solution": f"\\frac{{{i}}}{{{i + 1}}}",
         "level": f"L{i % 3}"} for i in range(6)]


def write_all(tmp: Path) -> dict[str, Path]:
    """The same rows as JSONL, JSON, CSV, Parquet, a saved Dataset and a saved DatasetDict."""
    import datasets

    ds = datasets.Dataset.from_list(ROWS)
    out = {"jsonl": tmp / "m.jsonl", "json": tmp / "m.json", "csv": tmp / "m.csv",
           "parquet": tmp / "m.parquet", "saved": tmp / "saved", "saved_dict": tmp / "saved_dict"}
    out["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out["json"].write_text(json.dumps(ROWS))
    ds.to_csv(str(out["csv"]))
    ds.to_parquet(str(out["parquet"]))
    ds.save_to_disk(str(out["saved"]))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(2))}).save_to_disk(str(out["saved_dict"]))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet", "saved", "saved_dict"])
def test_every_format_keeps_the_other_columns(files: dict[str, Path], kind: str) -> None:
    ds = load_prompts({"name": str(files[kind]), "prompt_column": "problem",
                       "solution_column": "solution"})
    assert ds["prompt"] == [r["problem"] for r in ROWS]
    assert ds["solution"] == [r["solution"] for r in ROWS] and ds["level"][:2] == ["L0", "L1"]


@pytest.mark.parametrize(("name", "text", "words"), [
    ("bad.csv", "problem,b\n1,2\n3,4,5\n", "ParserError: Error tokenizing data. C error: "
                                             "Expected 2 fields in line 3, saw 3"),
    ("bad.parquet", "PAR1 not parquet", "ArrowInvalid"),
    ("bad.jsonl", '{"problem": "a"}\n{"problem": \n', "ArrowInvalid"),
])
def test_a_file_that_does_not_load_is_a_dataset_error(tmp_path: Path, name: str, text: str,
                                                      words: str) -> None:
    """datasets' DatasetGenerationError ("An error occurred while generating the dataset") was
    no DatasetError: the probe died with it (a "not checked" note, then submitted) and every
    rank failed with it. Its cause names the line where pandas or pyarrow has one (#58)."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DatasetError, match=f"dataset file {path} does not load: ") as caught:
        load_prompts({"name": str(path), "prompt_column": "problem"})
    assert words in str(caught.value)


def test_split_of_a_saved_dataset_dict(files: dict[str, Path]) -> None:
    assert len(load_prompts({"name": str(files["saved_dict"]), "prompt_column": "problem",
                             "split": "test"})) == 2
    with pytest.raises(DatasetError, match="no split 'validation'; splits: train, test"):
        load_prompts({"name": str(files["saved_dict"]), "prompt_column": "problem",
                      "split": "validation"})


def test_missing_solution_column_lists_the_columns(files: dict[str, Path]) -> None:
    with pytest.raises(DatasetError, match="no solution column 'answer'; columns found: problem, "
                                           "solution, level"):
        load_prompts({"name": str(files["parquet"]), "prompt_column": "problem",
                      "solution_column": "answer"})


def test_accuracy_without_a_solution_column_is_refused_before_the_model(tmp_path: Path) -> None:
    from hpc_grpo.runtime.rank.data.job_inputs import load_dataset

    path = tmp_path / "q.jsonl"
    path.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    with pytest.raises(DatasetError, match="builtin:accuracy compares with the reference answer.*"
                                           "no column 'solution'; columns found: prompt, answer"):
        load_dataset(DatasetBlock(name=str(path)), ["builtin:format", "builtin:accuracy"])
    assert len(load_dataset(DatasetBlock(name=str(path), solution_column="answer"),
                            ["builtin:accuracy"])) == 1


def test_hub_name_without_a_hub_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    # what HF_HUB_OFFLINE=1 on the nodes sets (read once at import, so patched here)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DatasetError, match="could not load dataset 'nobody-xyz/none' config 'main' "
                                           "split 'train'.*stage it first"):
        load_prompts({"name": "nobody-xyz/none", "config": "main"})


def test_system_prompt_makes_chats_rendered_as_trl_does(files: dict[str, Path]) -> None:
    from hpc_grpo.runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    plain = load_prompts({"name": str(files["jsonl"]), "prompt_column": "problem"})
    chats = load_prompts({"name": str(files["jsonl"]), "prompt_column": "problem",
                          "system_prompt": "Answer in \\boxed{}."})
    assert chats[0]["prompt"] == [{"role": "system", "content": "Answer in \\boxed{}."},
                                  {"role": "user", "content": ROWS[0]["problem"]}]
    assert chats.column_names == ["prompt", "solution", "level"]
    # TRL 1.16 tokenises chats with apply_chat_template(add_generation_prompt=True, tokenize=True)
    trl_lengths = [len(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]) for p in chats["prompt"]]
    assert longest_prompt_tokens(chats, tok) == max(trl_lengths)
    assert longest_prompt_tokens(chats, tok) > longest_prompt_tokens(plain, tok) + 5


def test_prompts_that_are_already_messages(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "solution": "4"},
            {"prompt": [{"role": "system", "content": "own"}, {"role": "user", "content": "1?"}],
             "solution": "1"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_prompts({"name": str(path), "system_prompt": "Be brief."})
    assert [m["role"] for m in ds[0]["prompt"]] == ["system", "user"]
    assert ds[1]["prompt"][0]["content"] == "own"  # a system turn it has is kept, not doubled
    assert load_prompts({"name": str(path)})[0]["prompt"] == rows[0]["prompt"]


def test_custom_reward_receives_the_other_columns(files: dict[str, Path]) -> None:
    """TRL passes every column but prompt by name; the first-row call does the same."""
    from hpc_grpo.runtime.rank.data.job_inputs import call_once, load_dataset

    seen: dict[str, Any] = {}

    def reward(completions: list[Any], level: list[str], solution: list[str], **kw: Any) -> list[float]:
        seen.update(level=level, solution=solution, keys=sorted(kw),
                    step=kw["trainer_state"].global_step)  # rewards that shape by step work
        return [1.0]

    ds = load_dataset(DatasetBlock(name=str(files["csv"]), prompt_column="problem",
                                   system_prompt="S"), ["my:reward"])
    assert call_once(["my:reward"], [reward], ds[0], "", None) == {"my:reward": [1.0]}
    assert seen["level"] == ["L0"] and seen["solution"] == [ROWS[0]["solution"]] and seen["step"] == 0
    assert {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric"} <= set(seen["keys"])


def test_lora_config_and_qlora_refused_on_cpu() -> None:
    from hpc_grpo.runtime.rank.setup.model_load import (
        ModelLoadError,
        check_quantization,
        init_kwargs,
        lora_config,
    )

    config = lora_config(PeftBlock(r=8, alpha=16, dropout=0.0, target_modules=("q_proj", "k_proj")))
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 16, 0.0)
    assert set(config.target_modules) == {"q_proj", "k_proj"} and config.task_type == "CAUSAL_LM"
    assert lora_config(PeftBlock()).target_modules is None  # peft's default for the architecture
    assert lora_config(None) is None
    with pytest.raises(ModelLoadError, match="load_in_4bit \\(QLoRA\\) needs CUDA GPUs"):
        check_quantization(PeftBlock(load_in_4bit=True), "cpu")
    check_quantization(PeftBlock(), "cpu")
    assert init_kwargs(ModelBlock(revision="main", trust_remote_code=True)) == {
        "revision": "main", "trust_remote_code": True}
