"""The login node's view of built-in names must match what the ranks can load."""

from __future__ import annotations

from hpc_grpo.preflight import inputs
from hpc_grpo.runtime.rank.data import dataset, rewards


def test_builtin_datasets_match_runtime() -> None:
    assert set(inputs.BUILTIN_DATASETS) == {f"builtin:{n}" for n in dataset.BUILTIN}


def test_builtin_rewards_match_runtime() -> None:
    assert set(inputs.BUILTIN_REWARDS) == {f"builtin:{n}" for n in rewards.BUILTIN}


def test_builtin_models_are_the_runtime_shapes() -> None:
    """The launcher lists the built-in models without importing the runtime's shape table;
    a shape added on one side only would be refused on the login node or fail on the nodes."""
    from hpc_grpo.preflight.inputs import BUILTIN_CONTEXT, BUILTIN_MODELS
    from hpc_grpo.runtime.models.build import SHAPES

    assert sorted(BUILTIN_MODELS) == sorted(f"builtin:{name}" for name in SHAPES)
    assert {f"builtin:{n}": s.max_position_embeddings for n, s in SHAPES.items()} == BUILTIN_CONTEXT


def test_qwen2_shapes_have_the_published_parameter_counts() -> None:
    """Qwen2.5 sizes as published (with the built-in 32k vocabulary, tied embeddings)."""
    from hpc_grpo.runtime.models.build import SHAPES

    def params(name: str) -> float:
        s = SHAPES[name]
        head = s.hidden_size // s.num_attention_heads
        kv = s.num_key_value_heads * head
        attn = s.hidden_size * (s.hidden_size + 2 * kv) + (s.hidden_size + 2 * kv) + s.hidden_size ** 2
        mlp = 3 * s.hidden_size * s.intermediate_size
        layer = attn + mlp + 2 * s.hidden_size
        return (s.num_hidden_layers * layer + s.vocab_size * s.hidden_size + s.hidden_size) / 1e9

    assert abs(params("qwen2-7b") - 6.65) < 0.02
    assert abs(params("qwen2-1.5b") - 1.36) < 0.02   # 1.54 B with Qwen's 152k vocabulary
    assert abs(params("qwen2-0.5b") - 0.387) < 0.01  # 386.6 M measured (docs/gpu.md)
