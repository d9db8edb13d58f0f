"""The exported folder as vLLM serves it, held to the checkpoint's own model (GPU sites).

transformers loading the folder proves the files; vLLM loading it proves what users do next
(serve, evaluate, the next GRPO run's engine): its own weight loader (names, tied embeddings,
fused projections) and its own kernels. One engine over the folder scores the fixed texts with
teacher forcing (``prompt_logprobs=0``: the log-probability of each prompt token itself) and
continues each greedily, in one ``generate`` call.

Tolerance, and why it is looser than transformers': vLLM computes in bf16 (activations as well
as weights) against a reference in fp32. Assumption, to be replaced by the first measurement:
bf16 arithmetic moves a token's log-probability by at most a few hundredths of a nat on the
built-in shapes (the CPU check measured 0.02 for bf16 weights alone); a broken export (weights
of another layer, a lost tied head, an unmerged adapter with real training behind it) moves it
by nats. 0.5 nats sits between the two.
"""

from __future__ import annotations

from pathlib import Path

from hpc_grpo.runtime.posttrain import check, engine

TOLERANCE = 0.5
ENGINE = "vLLM (GPU, bf16)"


def run(ref: check.Reference, folder: str | Path, *, tensor_parallel: int = 1) -> check.CheckResult:
    """Load ``folder`` with vLLM and judge its readings of the fixed texts against ``ref``."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=check.GREEDY_TOKENS, temperature=0.0, prompt_logprobs=0)
    prompts = [{"prompt_token_ids": list(ids)} for ids in ref.ids]
    longest = max(len(ids) for ids in ref.ids) + check.GREEDY_TOKENS
    with engine.open_engine(folder, max_model_len=max(256, longest),
                            tensor_parallel=tensor_parallel) as llm:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    logprobs = [prompt_logprobs(out.prompt_logprobs, ids) for out, ids in zip(outputs, ref.ids, strict=True)]
    continuations = [[int(t) for t in out.outputs[0].token_ids] for out in outputs]
    return check.judge(ref, logprobs, continuations, TOLERANCE, ENGINE)


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
