"""A run record and its recording for the rank tests (moved out of test_runtime_checks.py)."""

from __future__ import annotations

from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.setup.placement import (
    expected_row,
)


def make_run(nodes: int = 2, ppn: int = 4, tp: int = 2, **vllm: Any) -> dict[str, Any]:
    ranks = [expected_row(r, ppn, tp) | {"dp_shard": r} for r in range(nodes * ppn)]
    return {
        "nodes": nodes,
        "procs_per_node": ppn,
        "world_size": nodes * ppn,
        "vllm": {"enabled": True, "mode": "colocate", "tensor_parallel_size": tp, **vllm},
        "grpo_config": {},
        "ranks": ranks,
    }


def record(run: dict[str, Any]) -> RunRecord:
    """The typed record the ranks read, from a test's (possibly edited) run.json mapping."""
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m",
                                "dataset": {"name": "d"}, **run})
