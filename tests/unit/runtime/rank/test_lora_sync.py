"""LoRA's weight push (runtime/rank/generation/lora_sync.py) against TRL's own walk, on a tiny bf16 Qwen2
with a trained-looking adapter: the same names and merged tensors on the first push, and a base
that stays bit for bit what it was over many pushes (TRL's merge/unmerge moves it)."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
vllm_generation = pytest.importorskip("trl.generation.vllm_generation")

from hpc_grpo.runtime.rank.generation import lora_sync  # noqa: E402

TARGETS = ["q_proj", "v_proj", "up_proj", "down_proj"]


class NoGather:
    is_fsdp = False

    def gather_params(self, params: Any) -> Any:
        return nullcontext()


def adapted(use_dora: bool = False, seed: int = 0) -> Any:
    config = transformers.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16)
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                           use_dora=use_dora, modules_to_save=["lm_head"])
    model = peft.get_peft_model(model, lora)
    with torch.no_grad():  # lora_B starts at zero, which merges exactly: make it trained-looking
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return model


def engine(model: Any) -> Any:
    """TRL's VLLMGeneration without its engine: just what the weight walk reads."""
    generation = vllm_generation.VLLMGeneration.__new__(vllm_generation.VLLMGeneration)
    generation.model, generation._dist = model, NoGather()
    return generation


def base_weights(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}


def pushed(walk: Any) -> dict[str, Any]:
    return {name: tensor.detach().clone() for name, tensor in walk()}


@pytest.mark.parametrize("use_dora", [False, True], ids=["lora", "dora"])
def test_first_push_is_trl_s_and_the_base_never_moves(use_dora: bool) -> None:
    ours, theirs = adapted(use_dora), None
    theirs = copy.deepcopy(ours)
    mine, trl = engine(ours), engine(theirs)
    assert lora_sync.why_not(mine) is None
    before = base_weights(ours)

    first_ours, first_trl = pushed(lambda: lora_sync.exact_walk(mine)), pushed(trl._iter_named_params)
    assert list(first_ours) == list(first_trl)  # same names, same order
    assert any(".q_proj.weight" in n for n in first_ours) and "lm_head.weight" in first_ours
    assert not any("lora_" in n or "base_layer" in n for n in first_ours)
    for name in first_trl:
        assert torch.equal(first_ours[name], first_trl[name]), name
    merged = first_ours["model.layers.0.self_attn.q_proj.weight"]
    base = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.equal(merged, base)  # the adapter did reach the pushed tensor

    for _ in range(4):
        assert pushed(lambda: lora_sync.exact_walk(mine)).keys() == first_ours.keys()
        pushed(trl._iter_named_params)
    after_ours, after_trl = base_weights(ours), base_weights(theirs)
    for name, tensor in before.items():
        assert torch.equal(after_ours[name], tensor), name
    assert not ours.base_model.model.model.layers[0].self_attn.q_proj.merged
    # why the patch exists: TRL's in-place merge/unmerge rounds the bf16 base (trl#6688)
    moved = [n for n, t in before.items() if not torch.equal(after_trl[n], t)]
    assert moved, "TRL's walk no longer moves the base: lora_sync may be retired"


def test_a_pushed_tensor_is_its_own_copy() -> None:
    """The engine may hold a pushed tensor past the next layer's merge (a server streams them):
    each merged tensor must survive the restore of its base."""
    model = adapted()
    mine = engine(model)
    walk = lora_sync.exact_walk(mine)
    kept = {name: tensor for name, tensor in walk}  # no clone: what the walk handed out
    again = pushed(lambda: lora_sync.exact_walk(mine))
    assert all(torch.equal(kept[n], again[n]) for n in kept)
    base = base_weights(model)["base_model.model.model.layers.1.mlp.up_proj.base_layer.weight"]
    assert not torch.equal(kept["model.layers.1.mlp.up_proj.weight"], base)


def test_layouts_that_keep_trl_s_push() -> None:
    model = adapted()
    fsdp = engine(model)
    fsdp._dist = type("Fsdp", (NoGather,), {"is_fsdp": True})()
    assert lora_sync.why_not(fsdp) == "FSDP walks its own way"
    plain = engine(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1)))
    assert lora_sync.why_not(plain) == lora_sync.NOT_PEFT
    trainer = type("T", (), {"vllm_generation": plain})()
    assert lora_sync.exact_push(trainer) is None and "_iter_named_params" not in vars(plain)

    biased = engine(peft.get_peft_model(adapted().get_base_model(), peft.LoraConfig(
        r=4, target_modules=["q_proj"], lora_bias=True), adapter_name="other"))
    assert lora_sync.why_not(biased) == "an adapter with a LoRA bias"
    trainer = type("T", (), {"vllm_generation": biased})()
    line = lora_sync.exact_push(trainer)
    assert line and "kept" in line and "_iter_named_params" not in vars(biased)


def test_install_replaces_the_walk_of_a_lora_engine() -> None:
    model = adapted()
    generation = engine(model)
    trainer = type("T", (), {"vllm_generation": generation})()
    assert lora_sync.exact_push(trainer) == lora_sync.NOTE
    before = base_weights(model)
    for _ in range(3):
        names = [name for name, _ in generation._iter_named_params()]
    assert "model.layers.1.mlp.down_proj.weight" in names
    assert all(torch.equal(base_weights(model)[n], t) for n, t in before.items())
    assert lora_sync.exact_push(type("T", (), {"vllm_generation": None})()) is None
