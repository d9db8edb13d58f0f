"""Offline example models of real shapes, built in code (no hub on the nodes or here).

``tiny`` is for CPU tests; ``qwen2-0.5b``, ``qwen2-1.5b`` and ``qwen2-7b`` have the layer shapes
of Qwen2.5-0.5B, -1.5B and -7B (layers, hidden and MLP sizes, query and KV heads from their
config.json) with a 32k vocabulary (the tokenizer is built in code), so GPU timings and memory
are those of real models while the weights stay random. 7B: 6.65 B parameters.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hpc_grpo.rundir.shapes import SHAPES, Shape
from hpc_grpo.runtime.models.tiny import build_tiny_model, write_qwen2

__all__ = ["SHAPES", "Shape", "build_model"]


def build_model(out_dir: Path, shape_name: str, *, seed: int = 0) -> Path:
    """Write a randomly initialised Qwen2 model of ``shape_name`` and its tokenizer."""
    if shape_name == "tiny":
        return build_tiny_model(out_dir, seed=seed)
    shape = SHAPES[shape_name]
    return write_qwen2(
        out_dir, seed=seed, hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads, num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings, vocab_size=shape.vocab_size, bf16=True,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m hpc_grpo.runtime.models.build SHAPE DIR``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in SHAPES:
        print(f"usage: python -m hpc_grpo.runtime.models.build {{{','.join(SHAPES)}}} DIR",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hpc-grpo-build-") as tmp:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tmp)  # torch makes it at import: not /tmp
        print(f"model written to {build_model(Path(args[1]), args[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
