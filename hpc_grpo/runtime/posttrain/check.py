"""Is the exported folder the checkpoint's model? Log-probabilities on a few fixed texts.

What a faithful export holds is known exactly: the checkpoint's weights (LoRA: merged into the
base, in fp32) rounded to the dtype written. So the check builds that model itself from the
checkpoint and scores the fixed texts with it (teacher forcing, fp32 arithmetic, on the GPU
where the exporting machine has one: CUDA's fp32 matmuls stay fp32, TF32 being off by
default); transformers' reading of the folder, upcast, must give the same numbers up to
summation order (TOLERANCE, any dtype). Anything the export can get wrong (a lost tied weight,
a tensor of another layer, a wrong merge before rounding, a tokenizer that splits the texts
otherwise) moves them far more.

Rounding's own effect is measured too (the checkpoint's model as trained against the rounded
one) and reported, not judged; a merged LoRA's merge is judged on its own, in fp32, against the
unmerged model that trained (``merge``). On the built-in random-weight shapes rounding to bf16
is not small. Measured:
0.0013 nats at most on builtin:tiny, 0.67 on builtin:qwen2-1.5b (2 x H200, 2026-11-26: 28
random layers amplify it); a trained model's own sensitivity is the user's to read in the
card. Greedy continuations are compared too and reported, not judged: one rounding can flip a
near tie.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Fixed texts: the built-in datasets' kinds of prompts and plain words, and one chat (rendered
# with the tokenizer's chat template where it has one).
TEXTS = (
    "Count on: 17 18 19 20 21 22",
    "What is 12 + 30? The answer is 42.",
    "the next number after seven is eight, and after eight is nine",
)
CHAT = [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "7"}]
GREEDY_TOKENS = 8
# Tolerance on |log p(folder) - log p(checkpoint's weights rounded to the dtype written)| per
# token: the same weights in the same fp32 arithmetic give the same numbers up to summation
# order (0.0 measured on CPU).
TOLERANCE = 1e-4


@dataclass(frozen=True)
class CheckResult:
    max_abs_diff: float
    mean_abs_diff: float
    tolerance: float
    tokens: int
    texts: int
    greedy_equal: int  # texts whose greedy continuation is the same token for token
    engine: str = "transformers (CPU)"
    judged_on: str = "max"  # the statistic held to the tolerance: "max" or "mean" |difference|

    @property
    def passed(self) -> bool:
        value = self.mean_abs_diff if self.judged_on == "mean" else self.max_abs_diff
        return value <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {"max_abs_diff": self.max_abs_diff, "mean_abs_diff": self.mean_abs_diff,
                "tolerance": self.tolerance, "judged_on": self.judged_on, "tokens": self.tokens,
                "texts": self.texts, "greedy_equal": self.greedy_equal, "passed": self.passed,
                "engine": self.engine}


@dataclass(frozen=True)
class Reference:
    """The checkpoint's own model on the fixed texts: the numbers every engine's reading of the
    exported folder is held to (computed once, so that the reference model can be freed before
    the next engine loads)."""

    ids: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...]  # log p of every token after the first
    greedy: tuple[tuple[int, ...], ...]


def texts(tokenizer: Any) -> list[str]:
    """The fixed texts, plus one chat when the tokenizer has a chat template."""
    out = list(TEXTS)
    if getattr(tokenizer, "chat_template", None):
        out.append(str(tokenizer.apply_chat_template(CHAT, tokenize=False)))
    return out


def token_logprobs(model: Any, ids: Any) -> Any:
    """log p(token | prefix) of every token after the first, in fp32."""
    import torch  # here: the module imports without torch

    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[0, :-1], dim=-1)
    return logp.gather(-1, ids[0, 1:, None])[:, 0]


def greedy(model: Any, ids: Any, pad_id: int | None) -> list[int]:
    import torch  # here: the module imports without torch

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=GREEDY_TOKENS, pad_token_id=pad_id,
                             repetition_penalty=1.0)  # plain greedy, as vLLM's reading is
    return [int(t) for t in out[0, ids.shape[1]:]]


def device_name(model: Any) -> str:
    """Where a model's readings are computed, for the check's engine line."""
    return "GPU" if str(getattr(model, "device", "cpu")).startswith("cuda") else "CPU"


def _readings(model: Any, tokenizer: Any, token_ids: list[list[int]]
              ) -> tuple[list[list[float]], list[list[int]]]:
    import torch  # here: the module imports without torch

    logprobs, continuations = [], []
    for row in token_ids:
        ids = torch.tensor([row], device=getattr(model, "device", "cpu"))
        logprobs.append([float(x) for x in token_logprobs(model, ids)])
        continuations.append(greedy(model, ids, tokenizer.pad_token_id))
    return logprobs, continuations


def reference(model: Any, tokenizer: Any) -> Reference:
    """The fixed texts' token ids, log-probabilities and greedy continuations under ``model``."""
    token_ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"])
                 for text in texts(tokenizer)]
    logprobs, continuations = _readings(model, tokenizer, token_ids)
    return Reference(ids=tuple(tuple(r) for r in token_ids),
                     logprobs=tuple(tuple(r) for r in logprobs),
                     greedy=tuple(tuple(r) for r in continuations))


def judge(ref: Reference, logprobs: Sequence[Sequence[float]], continuations: Sequence[Sequence[int]],
          tolerance: float, engine: str, judged_on: str = "max") -> CheckResult:
    """Another engine's readings against the reference: the largest (or the mean) per-token
    difference decides; greedy continuations are counted, not judged."""
    diffs: list[float] = []
    for want, got in zip(ref.logprobs, logprobs, strict=True):
        if len(want) != len(got):
            raise ValueError(f"{engine} scored {len(got)} tokens of a text, the reference {len(want)}")
        diffs.extend(abs(a - b) for a, b in zip(want, got, strict=True))
    equal = sum(list(a) == list(b) for a, b in zip(ref.greedy, continuations, strict=True))
    return CheckResult(max_abs_diff=max(diffs), mean_abs_diff=sum(diffs) / len(diffs),
                       tolerance=tolerance, tokens=len(diffs), texts=len(ref.ids),
                       greedy_equal=equal, engine=engine, judged_on=judged_on)


def rounded(model: Any, dtype: str) -> Any:
    """``model`` with every saved tensor rounded to ``dtype`` and held in fp32 again (in place):
    what a faithful export in that dtype holds, computed in the same arithmetic as the
    reference. Parameters and persistent buffers only: a buffer the folder does not hold (the
    rotary embedding's ``inv_freq``) is recomputed in fp32 when the folder loads, and rounding
    it here moved a 7B's readings by 0.02 nats (2 x H200, 2026-11-26)."""
    import torch  # here: the module imports without torch

    if dtype == "float32":
        return model
    saved = set(model.state_dict())
    with torch.no_grad():
        for tensor in [p for p in model.parameters()] + [
                b for n, b in model.named_buffers() if n in saved and b.is_floating_point()]:
            tensor.copy_(tensor.to(getattr(torch, dtype)).float())
    return model


# A LoRA adapter merged into the base in fp32 against the unmerged model that trained: the same
# function computed as (W + s·BA)x instead of Wx + s·B(Ax), so fp32 summation order only (far
# below this); a wrong merge (scale, transposition, a module missed) moves the readings by as
# much as the adapter does. Not yet measured on a GPU.
MERGE_TOLERANCE = 1e-3


def rounding(exact: Reference, written: Reference, dtype: str) -> dict[str, Any]:
    """How far rounding to ``dtype`` alone moves the readings (nil for fp32): reported, not
    judged (no "passed" key)."""
    result = judge(exact, written.logprobs, written.greedy, TOLERANCE, f"rounding to {dtype}").to_dict()
    del result["passed"], result["tolerance"]
    return result


def merge(unmerged: Reference, merged: Reference) -> CheckResult:
    """A merged LoRA in fp32, before rounding, against the unmerged model that trained:
    judged whatever dtype is written (MERGE_TOLERANCE), since the folder is compared with the
    merged model rounded and a wrong merge would be on both sides of that comparison."""
    return judge(unmerged, merged.logprobs, merged.greedy, MERGE_TOLERANCE, "LoRA merge (fp32)")


def compare_model(ref: Reference, exported: Any, tokenizer: Any) -> CheckResult:
    """The exported folder as transformers loaded it, upcast, against the checkpoint's weights
    rounded as written (see the module's docstring)."""
    logprobs, continuations = _readings(exported, tokenizer, [list(r) for r in ref.ids])
    return judge(ref, logprobs, continuations, TOLERANCE, f"transformers ({device_name(exported)})")


def compare(reference_model: Any, exported: Any, tokenizer: Any, dtype: str) -> CheckResult:
    """The checkpoint's model rounded to ``dtype`` against the exported one (tests' shortcut:
    the export child keeps the unrounded readings too)."""
    return compare_model(reference(rounded(reference_model, dtype), tokenizer), exported, tokenizer)
