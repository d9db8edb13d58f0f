"""The colocated engine's start without reading the model files (runtime/rank/generation/engine_weights.py).

vLLM does not run on this machine, so TRL's generation module is stood in for by a module whose
``LLM`` records its keyword arguments; the real TRL is checked for the names the wrapper needs,
and a real transformers model (the builtin tiny Qwen2) for the buffer rule.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from hpc_grpo.runtime.rank.generation import engine_weights


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


class _EngineModel(torch.nn.Module):
    """vLLM's model as TRL pushes to it: ``load_weights`` answers with the names it filled."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.qkv_proj = torch.nn.Linear(2, 2, bias=False)
        self.lm_head = torch.nn.Linear(2, 2, bias=False)
        self.answer = answer

    def load_weights(self, weights: Any) -> Any:
        return self.answer([name for name, _ in weights])


class _Pushing:
    """TRL's VLLMGeneration after ``_init_vllm``: ``sync_weights`` loads one tensor a call."""

    def __init__(self, model: _EngineModel, names: list[str]) -> None:
        self.llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(
                model_runner=types.SimpleNamespace(model=model)))))
        self.names, self.pushes = names, 0
        self.engine_from_pushed_weights = True

    def sync_weights(self) -> None:
        self.pushes += 1
        for name in self.names:
            engine_weights.engine_model(self).load_weights([(name, None)])


def _trainer(answer: Any, names: list[str]) -> Any:
    return types.SimpleNamespace(vllm_generation=_Pushing(_EngineModel(answer), names))


def _as_vllm_names(pushed: list[str]) -> set[str]:  # q/k/v fill the fused qkv_proj
    return {"qkv_proj.weight" if n.startswith(("q_", "k_", "v_")) else n for n in pushed}


def test_a_first_push_that_fills_every_parameter_is_said_and_unwrapped(
        capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _trainer(_as_vllm_names, ["q_proj.weight", "k_proj.weight", "v_proj.weight",
                                        "lm_head.weight"])
    generation = trainer.vllm_generation
    assert engine_weights.check_first_push(trainer)
    generation.sync_weights()
    assert "first weight push filled all 2 parameters of the vLLM engine" in capsys.readouterr().out
    assert "sync_weights" not in vars(generation)  # TRL's own from the second push on
    assert "load_weights" not in vars(engine_weights.engine_model(generation))
    generation.sync_weights()
    assert generation.pushes == 2 and capsys.readouterr().out == ""


def test_kv_cache_scales_are_not_counted_as_unfilled() -> None:
    """vLLM registers them as parameters only under a KV-cache quantization, set in code."""
    assert engine_weights.verdict({"qkv_proj.weight"}, ["qkv_proj.weight", "attn.k_scale",
                                                        "attn.v_scale"], [True]) \
        == "first weight push filled all 3 parameters of the vLLM engine"


def test_a_parameter_the_first_push_missed_ends_the_attempt_in_one_line() -> None:
    trainer = _trainer(_as_vllm_names, ["q_proj.weight", "k_proj.weight", "v_proj.weight"])
    engine_weights.check_first_push(trainer)
    with pytest.raises(engine_weights.EngineNotFilled, match=r"left 1 of 2 of its parameters "
                       r"unfilled \(lm_head.weight\); set HPC_GRPO_ENGINE_DUMMY_WEIGHTS=0"):
        trainer.vllm_generation.sync_weights()
    assert "load_weights" not in vars(engine_weights.engine_model(trainer.vllm_generation))
    from hpc_grpo.runtime.shared import setup_failure

    # every rank alike: a configuration error, not retried
    assert setup_failure.looks_like_configuration(engine_weights.EngineNotFilled("x"))


@pytest.mark.parametrize(("answer", "said"), [
    (lambda pushed: None, "load_weights names nothing"),  # an older vLLM model
    (lambda pushed: {f"model.{n}" for n in pushed}, "named what it filled otherwise"),
])
def test_no_verdict_where_the_names_cannot_be_compared(
        answer: Any, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _trainer(answer, ["lm_head.weight"])
    engine_weights.check_first_push(trainer)
    trainer.vllm_generation.sync_weights()  # no error: nothing to judge by
    assert "first weight push not checked: " in (out := capsys.readouterr().out) and said in out


def test_an_engine_that_read_its_files_is_not_watched() -> None:
    trainer = _trainer(_as_vllm_names, [])
    del trainer.vllm_generation.engine_from_pushed_weights
    assert not engine_weights.check_first_push(trainer)
    assert "sync_weights" not in vars(trainer.vllm_generation)
    assert not engine_weights.check_first_push(types.SimpleNamespace())  # no vLLM at all
