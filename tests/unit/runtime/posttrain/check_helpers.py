"""The tiny model and character tokenizer of the export check tests (moved out of test_check.py)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


transformers = pytest.importorskip("transformers")


class CharTokenizer:
    """Enough of a tokenizer for check.compare: ids per character, no chat template."""

    pad_token_id = 0
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, Any]:
        return {"input_ids": [1 + ord(c) % 120 for c in text]}


def tiny(seed: int) -> Any:
    config = transformers.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=128,
                                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=None)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    with torch.no_grad():  # init std 0.02 gives near-uniform predictions: make them peaked
        for param in model.parameters():
            param.mul_(3)
    return model.eval()
