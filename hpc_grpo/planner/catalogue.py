"""Built-in shapes of common dense models, copied from their config.json, so planning needs no
download. Names are the exact Hugging Face repository names: a base and an instruct model may
differ in max_position_embeddings, and callers turn the name back into a hub id.
"""

from __future__ import annotations

from functools import lru_cache

from hpc_grpo.planner.memory.arch import ModelArch, dense_arch
from hpc_grpo.rundir.shapes import MODEL_TYPE, SHAPES, TIED_EMBEDDINGS

_QWEN_VOCAB_SMALL = 151936  # Qwen2.5 <= 3B (tied embeddings), every Qwen3
_QWEN_VOCAB_LARGE = 152064  # Qwen2.5 >= 7B
_LLAMA3_VOCAB = 128256

# (size, hidden, layers, heads, kv_heads, intermediate, tied, base max positions)
_QWEN25 = (
    ("0.5B", 896, 24, 14, 2, 4864, True, 32768),
    ("1.5B", 1536, 28, 12, 2, 8960, True, 131072),
    ("3B", 2048, 36, 16, 2, 11008, True, 32768),
    ("7B", 3584, 28, 28, 4, 18944, False, 131072),
    ("14B", 5120, 48, 40, 8, 13824, False, 131072),
    ("32B", 5120, 64, 40, 8, 27648, False, 131072),
    ("72B", 8192, 80, 64, 8, 29568, False, 131072),
)
_QWEN25_MATH = ("1.5B", "7B", "72B")  # same shapes as Qwen2.5, 4k context
# (size, hidden, layers, heads, kv_heads, intermediate, tied); head_dim is 128 throughout.
_QWEN3 = (
    ("0.6B", 1024, 28, 16, 8, 3072, True),
    ("1.7B", 2048, 28, 16, 8, 6144, True),
    ("4B", 2560, 36, 32, 8, 9728, True),
    ("8B", 4096, 36, 32, 8, 12288, False),
    ("14B", 5120, 40, 40, 8, 17408, False),
    ("32B", 5120, 64, 64, 8, 25600, False),
)
# (name, hidden, layers, heads, kv_heads, intermediate)
_LLAMA = (
    ("Llama-3.1-8B", 4096, 32, 32, 8, 14336),
    ("Llama-3.1-8B-Instruct", 4096, 32, 32, 8, 14336),
    ("Llama-3.1-70B", 8192, 80, 64, 8, 28672),
    ("Llama-3.1-70B-Instruct", 8192, 80, 64, 8, 28672),
    ("Llama-3.3-70B-Instruct", 8192, 80, 64, 8, 28672),
)
# Names that moved on the hub (lower case); the arch keeps the current name.
_RENAMED = {
    "meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
    "meta-llama-3.1-70b": "llama-3.1-70b",
    "meta-llama-3.1-70b-instruct": "llama-3.1-70b-instruct",
}


def _qwen2(name: str, row: tuple[str, int, int, int, int, int, bool, int],
           max_pos: int) -> ModelArch:
    _, hidden, layers, heads, kv, inter, tied, _ = row
    return dense_arch(
        name, hidden_size=hidden, num_layers=layers, num_attention_heads=heads, num_kv_heads=kv,
        intermediate_size=inter, vocab_size=_QWEN_VOCAB_SMALL if tied else _QWEN_VOCAB_LARGE,
        tie_word_embeddings=tied, max_position_embeddings=max_pos, qkv_bias=True,
    )


@lru_cache(maxsize=1)
def _entries() -> dict[str, tuple[str, ModelArch]]:
    """hub id (lower case) -> (hub id, arch)."""
    archs: list[tuple[str, ModelArch]] = []
    for row in _QWEN25:
        size, max_pos = row[0], row[7]
        archs.append(("Qwen", _qwen2(f"Qwen2.5-{size}", row, max_pos)))
        archs.append(("Qwen", _qwen2(f"Qwen2.5-{size}-Instruct", row, 32768)))
        if size in _QWEN25_MATH:
            archs.append(("Qwen", _qwen2(f"Qwen2.5-Math-{size}", row, 4096)))
            archs.append(("Qwen", _qwen2(f"Qwen2.5-Math-{size}-Instruct", row, 4096)))
    for size, hidden, layers, heads, kv, inter, tied in _QWEN3:
        for suffix, max_pos in (("", 40960), ("-Base", 32768)):
            archs.append(("Qwen", dense_arch(
                f"Qwen3-{size}{suffix}", hidden_size=hidden, num_layers=layers,
                num_attention_heads=heads, num_kv_heads=kv, intermediate_size=inter,
                vocab_size=_QWEN_VOCAB_SMALL, tie_word_embeddings=tied,
                max_position_embeddings=max_pos, head_dim=128, qk_norm=True,
            )))
    for name, hidden, layers, heads, kv, inter in _LLAMA:
        archs.append(("meta-llama", dense_arch(
            name, hidden_size=hidden, num_layers=layers, num_attention_heads=heads,
            num_kv_heads=kv, intermediate_size=inter, vocab_size=_LLAMA3_VOCAB,
            tie_word_embeddings=False, max_position_embeddings=131072,
        )))
    return {f"{org}/{arch.name}".lower(): (f"{org}/{arch.name}", arch) for org, arch in archs}


def catalogue_names() -> tuple[str, ...]:
    """Hub ids of every built-in architecture, sorted."""
    return tuple(sorted(hub_id for hub_id, _ in _entries().values()))


def lookup_model(name: str) -> ModelArch | None:
    """The built-in arch for "org/Name" or "Name" (any case); None when unknown: the caller decides.

    An org other than the catalogue's (a fine-tune elsewhere) is not assumed to share the shape.
    """
    org, _, tail = name.strip().lower().rpartition("/")
    tail = _RENAMED.get(tail, tail)
    for hub_key, (_, arch) in _entries().items():
        entry_org, entry_tail = hub_key.split("/", 1)
        if entry_tail == tail and org in ("", entry_org):
            return arch
    return None


def builtin_arch(shape_name: str) -> ModelArch | None:
    """The arch of a built-in example model (``builtin:qwen2-7b`` -> "qwen2-7b") from the shape
    table the ranks build it from, as its written config.json will read (a Qwen2 config with
    q/k/v biases and tied embeddings): ``plan`` needs no files. None for an unknown name and for
    ``tiny``, whose vocabulary is the in-code tokenizer's (known once written)."""
    shape = SHAPES.get(shape_name)
    if shape is None or not shape.vocab_size:
        return None
    return dense_arch(
        shape_name, hidden_size=shape.hidden_size, num_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads, num_kv_heads=shape.num_key_value_heads,
        intermediate_size=shape.intermediate_size, vocab_size=shape.vocab_size,
        tie_word_embeddings=TIED_EMBEDDINGS, max_position_embeddings=shape.max_position_embeddings,
        qkv_bias=MODEL_TYPE == "qwen2",
    )
