"""runtime/posttrain/scoring.py's two engines: which one generates, and that vLLM's path
samples, tokenizes and cuts as the transformers one does.

vLLM cannot run here (no vLLM, no GPU): a stand-in ``vllm`` module in sys.modules records what
the child hands it (LLM arguments, prompts, SamplingParams, LoRARequest) and answers with fixed
token ids; ``engine.unavailable`` is patched to "" for it. The tiny model (tokenizer, configs)
is the project's own.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hpc_grpo.runtime.models import tiny  # noqa: E402
from hpc_grpo.runtime.posttrain import engine  # noqa: E402
from hpc_grpo.runtime.posttrain import scoring as child  # noqa: E402

EOS = (0, 3)  # the tiny model's generation config: <eos> and <|im_end|>
# Raw completions the stand-ins give, per sample: an EOS mid-way (the rest is dropped), the
# other EOS, none at all (kept whole).
RAW = ([40, 41, 0, 42, 43], [44, 3, 45, 46, 47], [48, 49, 50, 51, 52])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.build_tiny_model(tmp_path_factory.mktemp("tiny"))


class FakeVllm:
    """What the child gave the stand-in vLLM."""

    def __init__(self) -> None:
        self.llm: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []


def install(monkeypatch: pytest.MonkeyPatch, why: str = "") -> FakeVllm:
    seen = FakeVllm()

    class SamplingParams:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

    class LLM:
        def __init__(self, **kw: Any) -> None:
            seen.llm.append(kw)

        def generate(self, prompts: list[dict[str, Any]], sampling_params: Any = None, *,
                     use_tqdm: bool = True, lora_request: Any = None) -> list[Any]:
            seen.calls.append({"prompts": prompts, "params": [p.kw for p in sampling_params],
                               "lora": lora_request, "use_tqdm": use_tqdm})
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=tuple(raw(i, k)))
                                                   for k in range(p.kw["n"])])
                    for i, p in enumerate(sampling_params)]

    class LoRARequest:
        def __init__(self, name: str, int_id: int, path: str) -> None:
            self.args = (name, int_id, path)

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams  # type: ignore[attr-defined]
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest  # type: ignore[attr-defined]
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(engine, "unavailable", lambda: why)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # open_engine sets it; restored
    return seen


def raw(prompt: int, sample: int) -> list[int]:
    """The stand-ins' completion of a prompt's sample: RAW's, shifted by the prompt's index."""
    return [t if t in EOS else t + prompt for t in RAW[sample % len(RAW)]]


def expected(prompt: int, sample: int) -> list[int]:
    """What the child keeps of it: up to and with the first EOS."""
    row = raw(prompt, sample)
    return row[:next((i + 1 for i, t in enumerate(row) if t in EOS), len(row))]


def request(model_dir: Path, **over: Any) -> dict[str, Any]:
    return {"model": str(model_dir), "adapter": "", "reward_funcs": ["builtin:length"],
            "dataset": {"name": "builtin:digits", "prompt_column": "prompt", "split": "train"},
            "limit": 3, "num_samples": 3, "max_new_tokens": 5, "temperature": 0.7, "top_p": 0.9,
            "top_k": 0, "seed": 11, "engine": "auto", "tensor_parallel": 1, **over}


def test_vllm_samples_with_the_runs_settings_one_seed_per_completion(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = install(monkeypatch)
    answer = child.run(request(model_dir, min_p=0.05, repetition_penalty=1.1))
    assert answer["ok"] and (answer["engine"], answer["engine_note"]) == ("vllm", "")
    (llm,), (call,) = seen.llm, seen.calls
    assert call["params"] == [{"n": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 0, "min_p": 0.05,
                               "repetition_penalty": 1.1, "max_tokens": 5, "seed": 11 + 3 * i}
                              for i in range(3)]
    assert call["lora"] is None and call["use_tqdm"] is False
    longest = max(len(p["prompt_token_ids"]) for p in call["prompts"])
    assert longest + 5 <= llm["max_model_len"] <= 512  # rounded up, within the tiny model's 512
    assert (llm["model"], llm["dtype"], llm["seed"], llm["tensor_parallel_size"]) == (
        str(model_dir), "auto", 11, 1)
    assert "enable_lora" not in llm
    # prompt-major, cut after EOS: builtin:length is minus the distance from 16 characters
    tokenizer = tiny.load_tokenizer(model_dir)
    texts = [tokenizer.decode(expected(p, k), skip_special_tokens=True)
             for p in range(3) for k in range(3)]
    assert answer["rewards"] == [[-abs(len(t) - 16.0) for t in texts]]
    assert len(set(answer["rewards"][0])) > 1  # the order is visible in the values
    assert answer["example"]["completion"] == texts[0]


@pytest.mark.parametrize(("top_k", "sent"), [(None, 0), (-1, 0), (0, 0), (7, 7)])
def test_top_k_none_is_vllms_zero(top_k: Any, sent: int) -> None:
    got = child.sampling({"num_samples": 2, "temperature": 1.0, "max_new_tokens": 4, "top_k": top_k,
                          "seed": 5}, first=4, count=2)
    assert [g["top_k"] for g in got] == [sent, sent]
    assert [g["seed"] for g in got] == [5 + 8, 5 + 10]  # prompts 4 and 5, n=2 seeds each


class StubModel:
    """transformers' side: records the batch and returns the prompt plus RAW's completions."""

    def __init__(self) -> None:
        self.generation_config = types.SimpleNamespace(eos_token_id=list(EOS))
        self.batch: dict[str, Any] = {}

    def generate(self, input_ids: Any, attention_mask: Any, generation_config: Any) -> Any:
        self.batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        n = generation_config.num_return_sequences
        rows = [list(input_ids[i].tolist()) + raw(i, k)
                for i in range(input_ids.shape[0]) for k in range(n)]
        return torch.tensor(rows)


def test_both_engines_see_the_same_prompt_ids_and_cut_alike(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = install(monkeypatch)
    from tokenizers.processors import TemplateProcessing

    tokenizer = tiny.load_tokenizer(model_dir)
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token  # a special token that only add_special_tokens=True would prepend
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{eos} $A", special_tokens=[(eos, tokenizer.eos_token_id)])
    assert tokenizer("7")["input_ids"] != tokenizer("7", add_special_tokens=False)["input_ids"]
    prompts = ["Count on: 1 2", [{"role": "user", "content": "What is 16 + 3?"}], "7"]
    req = request(model_dir)
    stub = StubModel()
    by_transformers = child.generate(stub, tokenizer, prompts, req)
    by_vllm = child.vllm_completions(req, [{"prompt": p} for p in prompts], tokenizer, 0, 1)
    mask = stub.batch["attention_mask"].tolist()
    unpadded = [[t for t, m in zip(row, mask[i], strict=True) if m]
                for i, row in enumerate(stub.batch["input_ids"].tolist())]
    sent = [p["prompt_token_ids"] for p in seen.calls[0]["prompts"]]
    assert sent == unpadded and len({len(s) for s in sent}) > 1  # padding really was stripped
    assert "<|im_start|>assistant" in tokenizer.decode(sent[1])  # chat: generation prompt added
    assert by_vllm == by_transformers == [expected(p, k) for p in range(3) for k in range(3)]
    assert [len(c) for c in by_vllm[:3]] == [3, 2, 5]


def test_an_adapter_goes_through_vllms_lora(model_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen = install(monkeypatch)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 12}))
    answer = child.run(request(model_dir, adapter=str(adapter), limit=1, num_samples=1))
    assert answer["ok"] and answer["engine"] == "vllm"
    assert (seen.llm[0]["enable_lora"], seen.llm[0]["max_lora_rank"]) == (True, 16)
    assert seen.calls[0]["lora"].args == ("adapter", 1, str(adapter))
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "modules_to_save": ["lm_head"]}))
    name, note, _ = child.choose("auto", str(adapter))
    assert name == "transformers" and "modules_to_save" in note
    assert child.choose("vllm", str(adapter))[0] == ""
    for config, why in (({"rank_pattern": {"q": 32}}, "per-module"),
                        ({"alpha_pattern": {"q": 4}}, "per-module"),
                        ({"use_dora": True}, "DoRA"), ({"bias": "all"}, "biases")):
        (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "bias": "none", **config}))
        rank, note = child.lora_rank(str(adapter))
        assert rank == 0 and why in note, (config, note)  # transformers under auto
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 300, "bias": "none"}))
    assert child.lora_rank(str(adapter)) == (320, "")


def test_tensor_parallel_is_the_plans_within_this_nodes_gpus(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    answer = child.run(request(model_dir, tensor_parallel=4, limit=1))
    assert seen.llm[0]["tensor_parallel_size"] == 2 == answer["tensor_parallel"]  # 4's divisor


def test_vllm_asked_where_it_cannot_run_is_one_line(model_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, why="no CUDA GPU here")
    answer = child.run(request(model_dir, engine="vllm"))
    assert answer == {"ok": False, "error": "engine vllm cannot run: no CUDA GPU here"}
    assert child.choose("auto", "") == ("transformers", "vLLM not used: no CUDA GPU here", 0)
    assert child.run(request(model_dir, engine="tgi"))["ok"] is False


def test_deepspeed_shards_are_read_by_transformers_not_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)  # vLLM could run: the shards are still not a folder it loads
    name, note, _ = child.choose("auto", "", "zero")
    assert name == "transformers" and "DeepSpeed's shards only" in note and "export" in note
    name, note, _ = child.choose("vllm", "", "zero")
    assert name == "" and note.startswith("engine vllm cannot run: the checkpoint holds")
    assert child.choose("transformers", "", "zero") == ("transformers", "", 0)
    assert child.choose("auto", "")[0] == "vllm"  # a model folder still goes to vLLM


def test_auto_on_this_machine(model_dir: Path) -> None:
    why = engine.unavailable()
    if not why:
        pytest.skip("vLLM can run here")
    answer = child.run(request(model_dir, limit=2, num_samples=2, max_new_tokens=3))
    assert answer["ok"] and answer["engine"] == "transformers"
    assert answer["engine_note"] == f"vLLM not used: {why}"
    assert len(answer["rewards"][0]) == 4


def test_max_model_len(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    assert child.model_len(str(tmp_path), 300, 256) == 768
    assert child.model_len(str(tmp_path), 4000, 200) == 4200  # past the positions: vLLM says so
    assert child.model_len(str(tmp_path / "none"), 10, 10) == 256
