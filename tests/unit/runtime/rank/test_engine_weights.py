"""The colocated engine's start without reading the model files (runtime/rank/engine_weights.py).

vLLM does not run on this machine, so TRL's generation module is stood in for by a module whose
``LLM`` records its keyword arguments; the real TRL is checked for the names the wrapper needs,
and a real transformers model (the builtin tiny Qwen2) for the buffer rule.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from hpc_grpo.runtime.rank import engine_weights


class _Generation:
    """TRL's VLLMGeneration, reduced to what ``_init_vllm`` touches."""

    def __init__(self, model: Any, mode: str = "colocate") -> None:
        self.model, self.mode = model, mode

    def _init_vllm(self) -> None:
        if self.mode == "colocate":
            self.llm = _MODULE.LLM(model="/models/x", seed=0)


def _llm(**kwargs: Any) -> dict[str, Any]:
    return kwargs


_MODULE = types.SimpleNamespace(LLM=_llm, VLLMGeneration=_Generation)


@pytest.fixture
def fake_trl(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    monkeypatch.setattr(engine_weights, "_target",
                        lambda: (_MODULE, _Generation, vars(_Generation)["_init_vllm"]))
    return _MODULE


def _plain() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    model.register_buffer("inv_freq", torch.ones(2), persistent=False)  # as rotary embeddings do
    return model


def test_a_colocated_engine_gets_dummy_weights_and_trl_is_put_back(
        fake_trl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    raw = vars(_Generation)["_init_vllm"]
    generation = _Generation(_plain())
    with engine_weights.engine_from_pushed_weights({}):
        generation._init_vllm()
    assert generation.llm == {"model": "/models/x", "seed": 0, "load_format": "dummy"}
    assert vars(_Generation)["_init_vllm"] is raw and fake_trl.LLM is _llm
    assert engine_weights.NOTE in capsys.readouterr().out
    generation._init_vllm()  # outside the block: as TRL wrote it
    assert generation.llm == {"model": "/models/x", "seed": 0}


def test_switched_off_the_engine_reads_the_files(fake_trl: Any) -> None:
    raw = vars(_Generation)["_init_vllm"]
    generation = _Generation(_plain())
    with engine_weights.engine_from_pushed_weights({engine_weights.ENV: "0"}):
        assert vars(_Generation)["_init_vllm"] is raw  # not wrapped at all
        generation._init_vllm()
    assert "load_format" not in generation.llm


def test_a_model_with_persistent_buffers_reads_the_files(
        fake_trl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    model = _plain()
    model.register_buffer("running_scale", torch.ones(4))  # in the state dict, never pushed
    generation = _Generation(model)
    with engine_weights.engine_from_pushed_weights({}):
        generation._init_vllm()
    assert "load_format" not in generation.llm
    assert "persistent buffers TRL does not push (running_scale)" in capsys.readouterr().out


def test_a_quantized_model_reads_the_files(fake_trl: Any) -> None:
    class Linear4bit(torch.nn.Linear):  # bitsandbytes' class name, as TRL looks for it
        pass

    generation = _Generation(torch.nn.Sequential(Linear4bit(4, 4)))
    with engine_weights.engine_from_pushed_weights({}):
        generation._init_vllm()
    assert "load_format" not in generation.llm
    config = types.SimpleNamespace(quantization_config={"load_in_4bit": True})
    assert engine_weights.why_not(types.SimpleNamespace(config=config, modules=lambda: [])) \
        == "quantized model"


def test_trl_is_put_back_when_the_engine_start_raises(fake_trl: Any) -> None:
    raw = vars(_Generation)["_init_vllm"]

    def failing(**_: Any) -> None:
        raise RuntimeError("CUDA out of memory")

    fake_trl.LLM = failing
    try:
        with pytest.raises(RuntimeError), engine_weights.engine_from_pushed_weights({}):
            _Generation(_plain())._init_vllm()
        assert fake_trl.LLM is failing and vars(_Generation)["_init_vllm"] is raw
    finally:
        fake_trl.LLM = _llm


def test_server_mode_builds_no_engine_and_says_nothing(
        fake_trl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with engine_weights.engine_from_pushed_weights({}):
        _Generation(_plain(), mode="server")._init_vllm()
    assert capsys.readouterr().out == ""


def test_the_builtin_qwen2_has_no_persistent_buffers() -> None:
    """The rule's real case: rotary frequencies are non-persistent in transformers' Qwen2."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    model = Qwen2ForCausalLM(config)
    assert any(model.named_buffers())  # it has buffers ...
    assert engine_weights.why_not(model) is None  # ... none of them in its files


def test_the_installed_trl_has_what_the_wrapper_replaces() -> None:
    """TRL imports vLLM's LLM into its generation module only where vLLM is installed (the GPU
    nodes); the method, the module and the push-before-first-generation tag are checked here."""
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    assert callable(vars(vllm_generation.VLLMGeneration)["_init_vllm"])
    assert "self.llm = LLM(" in _source(vllm_generation.VLLMGeneration._init_vllm)
    assert "self._last_loaded_step = -1" in _source(grpo_trainer.GRPOTrainer.__init__)


def _source(function: Any) -> str:
    import inspect

    return inspect.getsource(function)
