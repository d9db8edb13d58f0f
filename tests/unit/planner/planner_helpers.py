"""The plan request the planner tests build, shared with other planner tests (moved out of
test_planner.py)."""

from __future__ import annotations

from typing import Any

from hpc_grpo.planner import (
    PlanRequest,
    lookup_model,
)


def request(model: str, **kw: Any) -> PlanRequest:
    arch = lookup_model(model)
    assert arch is not None, model
    values: dict[str, Any] = dict(
        nodes=1, gpus_per_node=8, gpu_memory_gib=80.0, cpu_memory_gib_per_node=1000.0,
        prompt_length=512, completion_length=1024, per_device_train_batch_size=8,
        num_generations=8)
    values.update(kw)
    return PlanRequest(arch=arch, **values)
