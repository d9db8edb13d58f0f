"""The plan's checkpoint step: the size of one checkpoint against the output file system's free
space and the node's memory (sizes: planner/checkpoint_size.py). Pure: the free space is a
value the launcher probed (preflight/inputs.py); None means unknown and checks nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.blocks import model_block
from hpc_grpo.planner.checkpoint_size import (
    GIB,
    CheckpointRequest,
    CheckpointSize,
    disk_verdict,
    host_verdict,
    size_checkpoint,
    size_limit,
)
from hpc_grpo.planner.memory.arch import ModelArch
from hpc_grpo.planner.memory_plan import MemoryPlan
from hpc_grpo.planner.speed.server import ServerPlan
from hpc_grpo.rundir.contract import DEFAULT_SAVE_TOTAL_LIMIT, DeepSpeedBlock
from hpc_grpo.rundir.precision import load_dtype

HALF_PRECISION = ("bfloat16", "bf16", "float16", "fp16", "half")


def checkpoint_request(spec: JobSpec, arch: ModelArch, device: str,
                       deepspeed: DeepSpeedBlock | None, world_size: int) -> CheckpointRequest:
    lora = bool(spec.use_peft or spec.grpo.get("use_peft"))
    limit = spec.grpo.get("save_total_limit", DEFAULT_SAVE_TOTAL_LIMIT)
    return CheckpointRequest(
        num_params=arch.num_params,
        trainable_params=arch.lora_params(spec.lora_r) if lora else arch.num_params,
        zero_stage=deepspeed.zero_stage if deepspeed else 0,
        offload_optimizer=bool(deepspeed and deepspeed.offload_optimizer), lora=lora,
        device=device, world_size=world_size,
        save_total_limit=int(limit) if limit is not None else None,
        weight_bytes=2 if load_dtype(model_block(spec), deepspeed is not None) in HALF_PRECISION
        else 4)


def schedules_saves(spec: JobSpec) -> bool:
    """False for ``save_strategy: no``: no periodic and no final checkpoint, a stop's alone
    (runtime/rank/callbacks.saves_at_end says the same on the ranks)."""
    return str(spec.grpo.get("save_strategy", "steps")).lower() != "no"


def resident_host_gib(memory: MemoryPlan | None, served: ServerPlan | None = None) -> float:
    """What training already holds in a node's memory (offloaded state): the colocated memory
    plan's, or in server mode the trainers' (server.py)."""
    if memory is not None:
        return dict(memory.breakdown).get("CPU memory per node", 0.0)
    return served.host_gib if served is not None else 0.0


def check_checkpoints(site: SiteProfile, spec: JobSpec, arch: ModelArch | None,
                      deepspeed: DeepSpeedBlock | None, memory: MemoryPlan | None,
                      world_size: int, free_bytes: int | None, where: str,
                      served: ServerPlan | None = None,
                      ) -> tuple[CheckpointSize | None, str, list[str], tuple[int, str] | None]:
    """The checkpoint size_checkpoint, why no checkpoint can fit ("" when one can), warnings, and
    (save_total_limit, why) where the plan sized it: the recipe left it unset (size_limit)."""
    if arch is None:
        return None, "", [], None
    request = checkpoint_request(spec, arch, site.device, deepspeed, world_size)
    size = size_checkpoint(request)
    warnings: list[str] = []
    problem, sized = "", None
    if "save_total_limit" not in spec.grpo:
        sized = (DEFAULT_SAVE_TOTAL_LIMIT, f"save_total_limit: unset -> {DEFAULT_SAVE_TOTAL_LIMIT}"
                 " (the default; the output file system's free space is unknown)")
        if free_bytes is not None:
            keep, line = size_limit(size.one, free_bytes, DEFAULT_SAVE_TOTAL_LIMIT, where)
            size = size_checkpoint(replace(request, save_total_limit=max(1, keep)))
            problem, sized = ("", (keep, line)) if keep else (line, (1, ""))
    verdict = ""
    if free_bytes is not None:
        verdict, warning = disk_verdict(size, free_bytes, where)
        problem = verdict or problem  # not even one checkpoint fits: that first
        if warning and not problem:
            warnings.append(f"checkpoints: {warning}")
    if problem and not schedules_saves(spec):
        # save_strategy "no" (a benchmark, a run that wants no checkpoints): only a stop saves,
        # one checkpoint at a time, and the rank skips a save that cannot fit (DiskSpaceCallback)
        warnings.append(
            f"checkpoints do not fit: {problem}: save_strategy is \"no\", so only a stop saves, "
            "and that save will be skipped: a requeue restarts from step 0" if verdict else
            f"checkpoints: {problem}: save_strategy is \"no\": only stops save, and a stop's save "
            "that does not fit beside the previous stop's checkpoint is skipped")
        problem = ""
    if problem:
        problem = f"checkpoints do not fit: {problem}"
        warnings.append(f"{problem} (submit refuses this)")
    host = host_verdict(size, resident_host_gib(memory, served), site.cpu_memory_gib)
    if host:
        warnings.append(f"checkpoints: {host}")
    return size, problem, warnings, sized


def refuse_if_no_fit(problem: str) -> None:
    """Submit and resume: a run whose checkpoints cannot fit is not queued."""
    if problem:
        raise UserError(problem, field="output_root",
                        hint="use an output root on a larger file system (--output-root), LoRA "
                             "(use_peft: true), or free space (where one checkpoint fits but not "
                             "two, an explicit save_total_limit: 1 runs: it keeps the first "
                             "checkpoint and skips later saves that do not fit)")


def checkpoint_report(size: CheckpointSize | None) -> dict[str, Any] | None:
    """For `plan --json`: one checkpoint's files in GiB, how many exist at once, the save's
    host memory."""
    if size is None:
        return None
    return {"files_gib": {name: round(b / GIB, 3) for name, b in size.items},
            "one_gib": round(size.one / GIB, 3), "at_once": size.at_once,
            "save_total_limit": None if size.at_once is None else size.at_once - 1,
            "peak_disk_gib": None if size.peak_disk is None else round(size.peak_disk / GIB, 3),
            "save_host_gib": round(size.host_bytes / GIB, 3)}
