"""A reward that depends on the prompt, records each step's prompts and asks for stops.

The reward is minus the distance between the completion's length and its prompt's, in
characters. With the built-in length reward a step on other (similar) prompts often got the
same completion lengths from the tiny model, hence the same reward and loss, and a wrong data
order showed in the metrics only some steps later.

For resume tests: ``HPC_GRPO_TEST_RUN_DIR`` names the run directory; every rank appends
``{"step", "prompts"}`` to ``prompts-rank-<RANK>.jsonl`` there, and rank 0 writes the
``stop-request`` file while computing the rewards of a step listed in ``HPC_GRPO_TEST_STOP_AT``
(comma-separated), so the run stops exactly at the end of that step (0 steps lost). Rank 0
raises instead, before recording, at the step ``HPC_GRPO_TEST_CRASH_AT`` names (a job that fails
before its first save: tests/slow/test_resume_resize_zero.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def prompt_length_recording(completions: list[str], prompts: list[str], trainer_state: Any,
                            **_: Any) -> list[float]:
    step = int(trainer_state.global_step) + 1  # the step these completions train
    run_dir = Path(os.environ["HPC_GRPO_TEST_RUN_DIR"])
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0 and str(step) == os.environ.get("HPC_GRPO_TEST_CRASH_AT"):
        raise RuntimeError(f"test: crash at step {step}")
    with (run_dir / f"prompts-rank-{rank}.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": step, "prompts": prompts}) + "\n")
    stop_at = {int(s) for s in os.environ.get("HPC_GRPO_TEST_STOP_AT", "").split(",") if s}
    if rank == 0 and step in stop_at:
        (run_dir / "stop-request").write_text(f"test: stop at step {step}\n")
    return [-float(abs(len(c) - len(p))) for c, p in zip(completions, prompts, strict=True)]


def on_ranks_only(completions: list[str], prompts: list[str], trainer_state: Any,
                  **kwargs: Any) -> list[float]:
    """``prompt_length_recording`` on the ranks (torchrun sets RANK); the same reward without a
    record or a stop for submit's and resume's login-node check of the reward on one row."""
    if "RANK" not in os.environ:
        return [-float(abs(len(c) - len(p))) for c, p in zip(completions, prompts, strict=True)]
    return prompt_length_recording(completions, prompts, trainer_state, **kwargs)
