"""runtime/posttrain/vllm_check.py: vLLM's reading of an exported folder, judged against the
checkpoint's model, and the export child's choice to run it or say why not.

vLLM cannot run here (no vLLM, no GPU): a stand-in ``vllm`` module answers ``generate`` as vLLM
0.26 does (``prompt_logprobs``: None for the first token, then a mapping token id -> Logprob
holding the prompt's own token and the top-ranked one; ``outputs[0].token_ids``), computed by
the model saved in the folder it was opened on. The real engine is the GPU test's
(tests/gpu/test_export_gpu.py).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hpc_grpo.runtime.posttrain import check, engine, export, vllm_check  # noqa: E402
from tests.unit.runtime.posttrain.check_helpers import CharTokenizer, tiny  # noqa: E402


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


class StandInLLM:
    opened: list[dict[str, Any]] = []
    asked: list[tuple[list[Any], Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        StandInLLM.opened.append(kwargs)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(kwargs["model"]).eval()

    def generate(self, prompts: list[dict[str, list[int]]], params: Any, use_tqdm: bool = True
                 ) -> list[Any]:
        StandInLLM.asked.append((prompts, params))
        outputs = []
        for prompt in prompts:
            ids = torch.tensor([prompt["prompt_token_ids"]])
            with torch.no_grad():
                logp = torch.log_softmax(self.model(input_ids=ids).logits[0].float(), dim=-1)
            positions: list[dict[int, Logprob] | None] = [None]
            for j in range(1, ids.shape[1]):
                row, own = logp[j - 1], int(ids[0, j])
                top = int(row.argmax())
                positions.append({own: Logprob(float(row[own])), top: Logprob(float(row[top]), 1)})
            greedy = check.greedy(self.model, ids, 0)[: params.kwargs["max_tokens"]]
            outputs.append(types.SimpleNamespace(
                prompt_logprobs=positions, outputs=[types.SimpleNamespace(token_ids=greedy)]))
        return outputs


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@pytest.fixture
def standin_vllm(monkeypatch: pytest.MonkeyPatch) -> type[StandInLLM]:
    module = types.ModuleType("vllm")
    module.LLM = StandInLLM  # type: ignore[attr-defined]
    module.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(engine, "unavailable", lambda **_: "")
    StandInLLM.opened, StandInLLM.asked = [], []
    return StandInLLM


def _folder(path: Path, seed: int) -> Path:
    tiny(seed).save_pretrained(path)
    return path


def test_vllm_reading_of_the_same_weights_passes_and_of_other_weights_fails(
        tmp_path: Path, standin_vllm: type[StandInLLM]) -> None:
    tokenizer = CharTokenizer()
    ref = check.reference(tiny(0), tokenizer)
    same = vllm_check.run(ref, _folder(tmp_path / "same", 0))
    assert same.passed and same.max_abs_diff < 1e-5 and same.engine == vllm_check.ENGINE
    assert same.tokens == sum(len(ids) - 1 for ids in ref.ids) and same.greedy_equal == 3
    prompts, params = standin_vllm.asked[0]
    assert [p["prompt_token_ids"] for p in prompts] == [list(ids) for ids in ref.ids]
    assert params.kwargs == {"max_tokens": check.GREEDY_TOKENS, "temperature": 0.0,
                             "prompt_logprobs": 0}
    opened = standin_vllm.opened[0]
    assert opened["dtype"] == "auto" and opened["enforce_eager"] is True
    assert opened["max_model_len"] >= max(len(ids) for ids in ref.ids) + check.GREEDY_TOKENS
    other = vllm_check.run(ref, _folder(tmp_path / "other", 1))
    assert not other.passed and other.mean_abs_diff > vllm_check.TOLERANCE and other.judged_on == "mean"


def test_a_position_without_the_prompt_token_is_an_error() -> None:
    positions = [None, {5: Logprob(-1.0)}, {9: Logprob(-2.0)}]
    assert vllm_check.prompt_logprobs(positions, (1, 5, 9)) == [-1.0, -2.0]
    with pytest.raises(ValueError, match="prompt token 2"):
        vllm_check.prompt_logprobs(positions, (1, 5, 7))


def test_the_export_child_runs_vllm_where_it_can_and_says_why_not_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = check.reference(tiny(0), CharTokenizer())
    request = {"target": str(_folder(tmp_path / "out", 0)), "layout": "full"}
    monkeypatch.setattr(engine, "unavailable", lambda **_: "vLLM is not installed here")
    assert export._vllm(request, ref) == {"skipped": "vLLM is not installed here"}
    assert "adapter" in export._vllm({**request, "adapter": True}, ref)["skipped"]
    calls: list[tuple[Any, str, int]] = []

    def judged(reference: check.Reference, folder: str, tensor_parallel: int) -> check.CheckResult:
        calls.append((reference, folder, tensor_parallel))
        return check.CheckResult(0.7, 0.3, vllm_check.TOLERANCE, 10, 3, 3, vllm_check.ENGINE, "mean")

    monkeypatch.setattr(engine, "unavailable", lambda **_: "")
    monkeypatch.setattr(vllm_check, "run", judged)
    assert export._vllm({**request, "vllm_check": "off"}, ref) == {"skipped": "turned off"}
    result = export._vllm({**request, "tensor_parallel": 2}, ref)
    assert calls == [(ref, request["target"], 2)] and result["passed"] is False

    def cannot_start(*_: Any, **__: Any) -> check.CheckResult:
        raise RuntimeError("Free memory on device (10.0/79.2 GiB) on startup is less than desired")

    monkeypatch.setattr(vllm_check, "run", cannot_start)  # said, the folder not held to it
    said = export._vllm(request, ref)
    assert said["skipped"].startswith("vLLM could not read the folder: RuntimeError: Free memory")


def test_the_weights_must_fit_the_engines_share_of_free_gpu_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """export passes the folder's bf16 size (the plan's parameter count) to unavailable."""
    folder = _folder(tmp_path / "w", 0)
    asked: list[int] = []
    monkeypatch.setattr(engine, "unavailable", lambda weights_bytes=0: asked.append(weights_bytes) or "x")
    params = sum(p.numel() for p in tiny(0).parameters())  # the tied head counted once
    export._vllm({"target": str(folder), "layout": "full", "num_params": params},
                 check.reference(tiny(0), CharTokenizer()))
    assert asked == [2 * params]


def test_a_failed_vllm_reading_fails_the_export_with_its_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    fine = check.CheckResult(0.001, 0.0005, 0.1, 40, 3, 3)
    off = check.CheckResult(2.5, 0.9, vllm_check.TOLERANCE, 40, 3, 1, vllm_check.ENGINE, "mean").to_dict()
    monkeypatch.setattr(export, "write", lambda request: [])
    monkeypatch.setattr(export, "verify", lambda request: (fine, off, {"max_abs_diff": 0.3}))
    answer = export.run({})
    assert answer["ok"] is False and answer["check"]["vllm"] == off
    assert answer["error"].startswith(vllm_check.ENGINE) and "2.5" in answer["error"]
    monkeypatch.setattr(export, "verify", lambda request: (fine, {"skipped": "no CUDA GPU here"},
                                                           {"max_abs_diff": 0.3}))
    assert export.run({})["ok"] is True
    moved = {"max_abs_diff": 0.7, "mean_abs_diff": 0.1, "engine": "rounding to bfloat16"}
    monkeypatch.setattr(export, "verify", lambda request: (fine, {"skipped": "x"}, moved))
    assert export.run({})["ok"] is True  # rounding alone is reported, not judged
    merge = check.CheckResult(0.2, 0.05, check.MERGE_TOLERANCE, 40, 3, 3, "LoRA merge (fp32)").to_dict()
    monkeypatch.setattr(export, "verify", lambda request: (fine, {"skipped": "x"}, {**moved, "merge": merge}))
    answer = export.run({})
    assert answer["ok"] is False and answer["error"].startswith("LoRA merge (fp32)")
