"""The plan request of the speed-choice tests, shared with the server-node tests (moved out of
test_speed_choice.py)."""

from __future__ import annotations

from typing import Any

from hpc_grpo.planner import PlanRequest
from hpc_grpo.planner.catalogue import builtin_arch, lookup_model


def request(shape: str, **kw: Any) -> PlanRequest:
    arch = builtin_arch(shape) or lookup_model(shape)
    assert arch is not None
    values: dict[str, Any] = dict(nodes=1, gpus_per_node=1, gpu_memory_gib=139.0,
                                  cpu_memory_gib_per_node=250.0, prompt_length=32,
                                  completion_length=256, per_device_train_batch_size=8,
                                  num_generations=8)
    return PlanRequest(arch=arch, **{**values, **kw})
