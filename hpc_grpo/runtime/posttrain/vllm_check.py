"""The exported folder as vLLM serves it, held to the checkpoint's own model (GPU sites).

transformers loading the folder proves the files; vLLM loading it proves what users do next
(serve, evaluate, the next GRPO run's engine): its own weight loader (names, tied embeddings,
fused projections) and its own kernels. One engine over the folder scores the fixed texts with
teacher forcing (``prompt_logprobs=0``: the log-probability of each prompt token itself) and
continues each greedily, in one ``generate`` call.

Held to the checkpoint's weights rounded as written (check.py), in fp32 arithmetic. vLLM
computes in bf16, activations as well as weights, so its readings differ by what bf16
arithmetic does to this model: on the built-in random-weight shapes that is as large as what
bf16 rounding of the weights does (2 x H200, 2026-11-26, builtin:qwen2-1.5b: vLLM 0.657 nats at
most against the unrounded weights, transformers with bf16-rounded weights 0.671), because
random layers amplify every rounding. The largest difference is therefore reported, and the
mean is judged: arithmetic rounding moves tokens both ways and a few far, while an export of
other weights moves every token by about the spread of the log-probabilities (about a nat on
these shapes). Assumption until measured against rounded weights: a mean of at most 0.25.
"""

from __future__ import annotations

from pathlib import Path

from hpc_grpo.runtime.posttrain import check, engine

TOLERANCE = 0.25  # on the mean |difference| per token
ENGINE = "vLLM (GPU)"


def run(ref: check.Reference, folder: str | Path, *, tensor_parallel: int = 1) -> check.CheckResult:
    """Load ``folder`` with vLLM and judge its readings of the fixed texts against ``ref``."""
    from vllm import SamplingParams  # here: only where vLLM runs

    params = SamplingParams(max_tokens=check.GREEDY_TOKENS, temperature=0.0, prompt_logprobs=0)
    prompts = [{"prompt_token_ids": list(ids)} for ids in ref.ids]
    longest = max(len(ids) for ids in ref.ids) + check.GREEDY_TOKENS
    # dtype "auto": vLLM's serving default (bf16 for a bf16 or fp32 folder on a GPU that has
    # it, fp16 on older ones), what users who load the folder get
    llm = engine.open_engine(folder, max_model_len=max(256, longest), dtype="auto",
                             tensor_parallel=tensor_parallel)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    logprobs = [prompt_logprobs(out.prompt_logprobs, ids) for out, ids in zip(outputs, ref.ids, strict=True)]
    continuations = [[int(t) for t in out.outputs[0].token_ids] for out in outputs]
    return check.judge(ref, logprobs, continuations, TOLERANCE, ENGINE, judged_on="mean")


def prompt_logprobs(positions: object, ids: tuple[int, ...]) -> list[float]:
    """vLLM's per-position prompt log-probabilities (None for the first token, then a mapping
    token id -> Logprob that holds the prompt's own token) as a list for tokens 1..n-1."""
    out = []
    for j in range(1, len(ids)):
        entry = positions[j]  # type: ignore[index]
        if not entry or ids[j] not in entry:
            raise ValueError(f"vLLM returned no log-probability for prompt token {j}")
        out.append(float(entry[ids[j]].logprob))
    return out
