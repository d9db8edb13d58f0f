"""One vLLM engine in this process for the post-training steps (the export's check, ``eval``).

Why its own engine and not the ranks': export and eval run after training, in a child Python
on one node (the login node, a local machine or an export job), with no torchrun and no
trainer: vLLM's own single-process executor is the right one (``external_launcher`` exists to
share ranks with a trainer). V1's engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that nothing outlives the child. CUDA graphs and
torch.compile are off (``enforce_eager``): a few hundred tokens do not repay their start-up.

``unavailable()`` says why vLLM cannot run here ("" when it can): the CPU sites and this
project's CI have no vLLM, and the transformers path serves them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# The GPU memory the engine may take: what a post-training step needs is the weights and a
# small KV cache; the rest stays free for whatever else the node runs.
GPU_SHARE = 0.6


def unavailable(weights_bytes: int = 0) -> str:
    """Why vLLM cannot run in this process ("" when it can); ``weights_bytes``: the model's
    weights as the engine holds them, which must fit its share of one GPU's free memory."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "vLLM is not installed here"
    import torch  # here: the module imports without torch

    if not torch.cuda.is_available():
        return "no CUDA GPU here"
    free, _ = torch.cuda.mem_get_info()
    if weights_bytes > GPU_SHARE * free:
        return (f"the weights ({weights_bytes / 2**30:.1f} GiB) do not fit {GPU_SHARE:.0%} of this "
                f"GPU's free memory ({free / 2**30:.1f} GiB)")
    return ""


def open_engine(folder: str | Path, *, max_model_len: int, tensor_parallel: int = 1,
                dtype: str = "bfloat16", seed: int = 0,
                gpu_share: float = GPU_SHARE, **engine_args: Any) -> Any:
    """A vLLM ``LLM`` over a Hugging Face folder (its own tokenizer). It keeps its GPU memory
    while the process lives: both children run vLLM as their last GPU step and exit, which
    frees it. ``engine_args`` go to ``LLM`` as they are (``enable_lora=True,
    max_lora_rank=16`` for an adapter)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM  # here: only where vLLM runs

    return LLM(model=str(folder), tokenizer=str(folder), dtype=dtype, seed=seed,
               tensor_parallel_size=tensor_parallel, gpu_memory_utilization=gpu_share,
               max_model_len=max_model_len, enforce_eager=True, **engine_args)
