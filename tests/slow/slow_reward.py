"""Rewards that take a fixed time, so a test's step time has a floor whatever the machine's load."""

from __future__ import annotations

import time
from typing import Any

from hpc_grpo.runtime.rank.data.rewards import length


def slow_length(completions: list[Any], **kwargs: Any) -> list[float]:
    time.sleep(0.5)
    return length(completions, **kwargs)


def one_second_length(completions: list[Any], **kwargs: Any) -> list[float]:
    time.sleep(1.0)
    return length(completions, **kwargs)


def slow_length_recording(completions: list[Any], prompts: list[Any], **kwargs: Any) -> list[float]:
    """slow_length, and each step's prompts appended to prompts-rank-<RANK>.jsonl in
    HPC_GRPO_TEST_RUN_DIR or the job's HPC_GRPO_RUN_DIR (tests/slow/resume_reward.py's record),
    for data-order checks."""
    import json
    import os
    from pathlib import Path

    folder = os.environ.get("HPC_GRPO_TEST_RUN_DIR") or os.environ.get("HPC_GRPO_RUN_DIR")
    if not folder or kwargs.get("trainer_state") is None:  # the login node's probe call
        return slow_length(completions, **kwargs)
    step = int(kwargs["trainer_state"].global_step) + 1
    run_dir = Path(folder)
    with (run_dir / f"prompts-rank-{os.environ.get('RANK', '0')}.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": step, "prompts": prompts, "completions": completions,
                                 "rng": _rng_digest()}) + "\n")
    return slow_length(completions, **kwargs)


def _rng_digest() -> str:
    """A short hash of this process's torch, numpy and Python RNG states (resume checks)."""
    import hashlib
    import random

    import numpy as np
    import torch

    sha = hashlib.sha256(torch.get_rng_state().numpy().tobytes())
    sha.update(repr(random.getstate()).encode())
    sha.update(repr(np.random.get_state()[1][:8].tolist()).encode())
    return sha.hexdigest()[:12]
