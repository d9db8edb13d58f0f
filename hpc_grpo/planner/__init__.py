"""Memory and topology planner for colocated GRPO: TP size, ZeRO stage, offload, vLLM memory.

Pure arithmetic on a model's shape and the cluster's sizes: no torch, no hardware probing, no
files, so the login node can plan and explain a job before anything is submitted. Assumptions
of the memory model are listed in ``hpc_grpo.planner.memory.estimate``.

Its rooms form a stack, each importing only those below it: ``memory`` (the model's shape, the
plan request, per-GPU memory of a layout), then ``speed`` (step times; the fastest layout that
fits), then the planner's own modules (``memory_plan.py`` ties the two rooms together,
``job.py``'s ``build_plan`` plans the whole job).
"""

from hpc_grpo.planner.batch import check_batch_rules
from hpc_grpo.planner.catalogue import catalogue_names, lookup_model
from hpc_grpo.planner.memory.arch import ModelArch, arch_from_config, dense_arch
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory_plan import MemoryPlan, plan_memory

__all__ = [
    "MemoryPlan",
    "ModelArch",
    "PlanRequest",
    "arch_from_config",
    "catalogue_names",
    "check_batch_rules",
    "dense_arch",
    "lookup_model",
    "plan_memory",
]
