"""A reward that records what reached the rank's environment (tests/slow/test_local_backend_runs.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.rank.data.rewards import length


def length_recording_env(completions: list[Any], **kwargs: Any) -> list[float]:
    """The length reward; on a training step, the rank's HPC_GRPO_TEST_MARK and OMP_NUM_THREADS
    written to env-rank-<RANK>.json in the job's run directory."""
    run_dir = os.environ.get("HPC_GRPO_RUN_DIR")
    if run_dir and kwargs.get("trainer_state") is not None:  # not the login node's probe call
        seen = {k: os.environ.get(k) for k in ("HPC_GRPO_TEST_MARK", "OMP_NUM_THREADS", "RANK")}
        Path(run_dir, f"env-rank-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(seen))
    return length(completions, **kwargs)
