"""Dense decoder architectures: the few numbers the memory model needs, and their parameter count.

The count is exact for Qwen2/Qwen2.5, Qwen3 and Llama 3 layouts (embeddings, GQA attention with
optional q/k/v bias and q/k norms, SwiGLU MLP, RMSNorms, lm head unless tied), so a config.json
is enough: planning never downloads weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_grpo.errors import UserError

# config.json keys that mark a mixture-of-experts model, which the dense memory model misjudges.
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")


@dataclass(frozen=True)
class ModelArch:
    """One model's shape. ``head_dim`` None means hidden_size // num_attention_heads."""

    name: str
    num_params: int
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    head_dim: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def layer_params(self) -> int:
        return _layer_params(self.hidden_size, self.num_attention_heads, self.num_kv_heads,
                             self.dim_per_head, self.intermediate_size, self.qkv_bias, self.qk_norm)

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V for every layer: what one token costs in vLLM's KV cache (all TP shards)."""
        return 2 * self.num_layers * self.num_kv_heads * self.dim_per_head * 2

    def lora_params(self, rank: int, targets: tuple[str, ...] = ()) -> int:
        """Adapter size for LoRA of this rank on the named linear layers of every decoder layer
        (A: in x r, B: r x out); none named, or "all-linear": every one of them."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_attention_heads * self.dim_per_head, self.num_kv_heads * self.dim_per_head
        sizes = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
                 "gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
        named = sizes if not targets or "all-linear" in targets else targets
        return rank * sum(sizes.get(name, 0) for name in named) * self.num_layers


def _layer_params(h: int, heads: int, kv_heads: int, head_dim: int, inter: int,
                  qkv_bias: bool, qk_norm: bool) -> int:
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = h * q + 2 * h * kv + q * h
    if qkv_bias:
        attention += q + 2 * kv
    if qk_norm:
        attention += 2 * head_dim
    return attention + 3 * h * inter + 2 * h  # SwiGLU gate/up/down + two RMSNorms


def dense_arch(name: str, *, hidden_size: int, num_layers: int, num_attention_heads: int,
               num_kv_heads: int, intermediate_size: int, vocab_size: int,
               tie_word_embeddings: bool, max_position_embeddings: int,
               head_dim: int | None = None, qkv_bias: bool = False,
               qk_norm: bool = False) -> ModelArch:
    """A ModelArch whose num_params is counted from the shape, as the published sizes are."""
    hd = head_dim or hidden_size // num_attention_heads
    if head_dim == hidden_size // num_attention_heads:
        head_dim = None  # one spelling per shape, so equal shapes compare equal
    layer = _layer_params(hidden_size, num_attention_heads, num_kv_heads, hd, intermediate_size,
                          qkv_bias, qk_norm)
    embed = vocab_size * hidden_size
    total = embed + num_layers * layer + hidden_size + (0 if tie_word_embeddings else embed)
    return ModelArch(
        name=name, num_params=total, hidden_size=hidden_size, num_layers=num_layers,
        num_attention_heads=num_attention_heads, num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size, vocab_size=vocab_size,
        tie_word_embeddings=tie_word_embeddings, max_position_embeddings=max_position_embeddings,
        head_dim=head_dim, qkv_bias=qkv_bias, qk_norm=qk_norm,
    )


def _positive_int(cfg: Mapping[str, Any], key: str, name: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"config.json of {name}: '{key}' is {value!r}, expected a positive integer",
                        field="config.json")
    return value


def arch_from_config(cfg: Mapping[str, Any], name: str) -> ModelArch:
    """Read a Hugging Face config.json (Qwen2, Qwen3, Llama keys) that the caller already parsed."""
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]  # multimodal wrappers keep the language model one level down
    moe = [key for key in _MOE_KEYS if cfg.get(key)]
    if moe:
        raise UserError(
            f"{name} is a mixture-of-experts model ({moe[0]} in config.json)",
            field="config.json",
            hint="the planner models dense models only: set tensor_parallel_size, zero_stage and "
                 "vllm_gpu_memory_utilization yourself",
        )
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size", "max_position_embeddings")
    missing = [key for key in required if key not in cfg]
    if missing:
        raise UserError(
            f"config.json of {name} lacks {', '.join(missing)}",
            field="config.json",
            hint="is this a decoder-only language model's config.json (Qwen2, Qwen3, Llama)?",
        )
    hidden, layers, heads, inter, vocab, max_pos = (
        _positive_int(cfg, key, name) for key in required)
    kv_heads = _positive_int(cfg, "num_key_value_heads", name) if cfg.get(
        "num_key_value_heads") is not None else heads
    head_dim = _positive_int(cfg, "head_dim", name) if cfg.get("head_dim") is not None else None
    if head_dim is None and hidden % heads:
        raise UserError(f"config.json of {name}: hidden_size {hidden} is not a multiple of "
                        f"num_attention_heads {heads} and head_dim is missing", field="config.json")
    if heads % kv_heads:
        raise UserError(f"config.json of {name}: num_attention_heads {heads} is not a multiple of "
                        f"num_key_value_heads {kv_heads}", field="config.json")
    model_type = str(cfg.get("model_type", "")).lower()
    return dense_arch(
        name, hidden_size=hidden, num_layers=layers, num_attention_heads=heads,
        num_kv_heads=kv_heads, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=max_pos,
        head_dim=head_dim,
        # Qwen2 hard-codes q/k/v biases without a config key; others say attention_bias.
        qkv_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
        qk_norm=model_type.startswith("qwen3"),
    )
