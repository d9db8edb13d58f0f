"""The plan as the ``plan`` command shows it: plain data from a JobPlan, and why a plan has no
memory part (CPU sites, server mode, an unknown architecture)."""

from __future__ import annotations

from typing import Any

from hpc_grpo.planner.checkpoint_fit import checkpoint_report
from hpc_grpo.planner.job import JobPlan
from hpc_grpo.planner.topology import layout_line
from hpc_grpo.rundir.contract import block_dict


def plan_report(plan: JobPlan) -> dict[str, Any]:
    """The JobPlan that render and submit use, as the plan command shows it."""
    memory = plan.memory
    why_none = None
    if memory is None:
        if plan.device == "cpu":
            why_none = (f"site '{plan.site.name}' has no GPUs: ranks train fp32 DDP over gloo and "
                        "generate with transformers, so there is no vLLM or GPU memory to plan")
        elif plan.server is not None:
            why_none = ("server mode: trainer GPUs hold no engine (server_plan has their memory) "
                        f"and `vllm serve` gets {plan.vllm.gpu_memory_utilization} of its GPUs")
        else:
            why_none = (f"the architecture of {plan.model.source} is unknown (no local config.json, "
                        "not in the catalogue: --list-models), so TP 1 and TRL's vLLM defaults")
    return {
        "site": plan.site.name, "model": plan.model.source, "device": plan.device,
        "nodes": plan.nodes, "training_nodes": plan.training_nodes,
        "procs_per_node": plan.procs_per_node, "world_size": plan.world_size,
        "layout": layout_line(plan.nodes, plan.training_nodes, plan.procs_per_node,
                              plan.world_size),
        "tensor_parallel_size": plan.tensor_parallel_size, "vllm": block_dict(plan.vllm),
        "deepspeed": block_dict(plan.deepspeed), "memory_plan": memory.to_dict() if memory else None,
        "no_memory_plan": why_none, "warnings": list(plan.warnings),
        "precision": plan.precision, "changed_from_recipe": list(plan.changes),
        "checkpoint": checkpoint_report(plan.checkpoint),
        "save": plan.save.to_dict() if plan.save else None,
        "speed": memory.speed.to_dict() if memory and memory.speed else None,
        "step_time": plan.step_time.to_dict() if plan.step_time else None,
        "server_plan": plan.server_plan.to_dict() if plan.server_plan else None,
    }
