"""A tiny Qwen2-architecture model and a byte-level BPE tokenizer, built in code, no hub needed.

Used by tests and smoke runs: a few seconds to build, about 0.1 s per GRPO step on CPU.
Load the tokenizer with `PreTrainedTokenizerFast`: `AutoTokenizer` swaps in `Qwen2Tokenizer`
for a Qwen2 folder and tokenises differently.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"
PAD = "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL = [EOS, PAD, IM_START, IM_END]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_WORDS = "the a one two three four five six seven eight nine ten count add sum number digit list "
_WORDS += "next after before write say answer question short long yes no and or is are what how"
WORDS = tuple(_WORDS.split())


def corpus(seed: int, lines: int = 2000) -> list[str]:
    """Deterministic training text for the tokenizer: words, digits and simple sums."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        kind = rng.randrange(3)
        if kind == 0:
            out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))))
        elif kind == 1:
            start = rng.randint(0, 90)
            out.append(" ".join(str(start + i) for i in range(rng.randint(3, 8))))
        else:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            out.append(f"What is {a} + {b}? The answer is {a + b}.")
    return out


def build_tokenizer(seed: int = 0, vocab_size: int = 512) -> Any:
    """A byte-level BPE trained in memory, wrapped as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # no stack at import
    from transformers import PreTrainedTokenizerFast  # here: the module imports without the training stack

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        bos_token=None,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=512,
    )


def build_tiny_model(
    out_dir: Path, *, seed: int = 0, hidden_size: int = 64, num_hidden_layers: int = 2
) -> Path:
    """Write model and tokenizer to out_dir (deterministic for a seed) and return out_dir.

    4 query and 2 KV heads; vLLM's attention kernels need hidden_size 256 (head_dim 64).
    """
    return write_qwen2(out_dir, seed=seed, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=num_hidden_layers, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=512)


def write_qwen2(
    out_dir: Path, *, seed: int, hidden_size: int, intermediate_size: int, num_hidden_layers: int,
    num_attention_heads: int, num_key_value_heads: int, max_position_embeddings: int,
    vocab_size: int = 0, bf16: bool = False,
) -> Path:
    """A randomly initialised Qwen2 causal LM of this shape plus the in-code tokenizer.

    ``vocab_size`` 0 means the tokenizer's own size; a larger one pads the embedding to a real
    model's size (ids past the tokenizer are simply never produced by it).
    """
    import torch  # here: the module imports without torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM  # no stack at import

    out_dir = Path(out_dir)
    tokenizer = build_tokenizer(seed)
    tokenizer.model_max_length = max_position_embeddings
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    config = Qwen2Config(
        vocab_size=max(vocab_size, len(tokenizer)),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if bf16:
        model = model.to(dtype=torch.bfloat16)  # type: ignore[call-arg]
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, im_end_id], pad_token_id=pad_id, do_sample=True
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_tokenizer(model_dir: str | Path) -> Any:
    """Load a tokenizer the way the ranks do (fast tokenizer from tokenizer.json)."""
    from transformers import PreTrainedTokenizerFast  # here: the module imports without the training stack

    if (Path(model_dir) / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    from transformers import AutoTokenizer  # a hub id or a folder without tokenizer.json

    return AutoTokenizer.from_pretrained(str(model_dir))


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.models.tiny DIR [SEED [HIDDEN_SIZE]]`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2, 3):
        print("usage: python -m hpc_grpo.runtime.models.tiny DIR [SEED [HIDDEN]]", file=sys.stderr)
        return 2
    seed = int(args[1]) if len(args) >= 2 else 0
    hidden = int(args[2]) if len(args) == 3 else 64
    path = build_tiny_model(Path(args[0]), seed=seed, hidden_size=hidden)
    print(f"tiny model written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
