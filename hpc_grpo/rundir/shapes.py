"""The built-in example models' shapes as plain numbers: standard library only, so the launcher
plans ``builtin:qwen2-7b`` before its files are written (planner/catalogue.py ``builtin_arch``)
and the ranks build the same shape (runtime/models/build.py). One table, so the two
cannot drift apart. In the run directory's room because both sides import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # 0: the tokenizer's own size
    max_position_embeddings: int


SHAPES = {
    "tiny": Shape(64, 128, 2, 4, 2, 0, 512),
    "qwen2-0.5b": Shape(896, 4864, 24, 14, 2, 32768, 4096),
    "qwen2-1.5b": Shape(1536, 8960, 28, 12, 2, 32768, 4096),
    "qwen2-7b": Shape(3584, 18944, 28, 28, 4, 32768, 4096),
}
# How tiny.write_qwen2 writes every one of them: a Qwen2 config (q/k/v biases) with tied
# embeddings.
TIED_EMBEDDINGS = True
MODEL_TYPE = "qwen2"
