"""Helpers of the run-view tests (moved out of test_views_unit.py)."""

from __future__ import annotations

import time
from typing import Any

from hpc_grpo.runs import track


def _row(run_id: str = "grpo-tiny-0001", **over: Any) -> track.RunStatus:
    now = time.time()
    fields: dict[str, Any] = dict(
        run_id=run_id, run_dir=f"/r/{run_id}", site="sandbox", job_id="1234567",
        state="RUNNING", finished=False, meaning="running on its nodes", phase="training",
        step=1000, max_steps=1000, reward=-31.5, tokens_per_s=12345.0, checkpoint_step=1000,
        checkpoint_time=now - 59 * 60, requeues=2, nodes="node[1-4]",
        restarts=({"cause": "preempted", "steps_lost": 0},
                  {"cause": "node failure", "steps_lost": 3}),
    )
    fields.update(over)
    return track.RunStatus(**fields)
