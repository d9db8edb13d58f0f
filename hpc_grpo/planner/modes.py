"""The plan request a job spec makes, server mode's plan, and ``vllm_mode: auto``.

``auto`` (spec or ``--vllm-mode auto``) plans both modes and keeps the one predicted faster
(planner/speed); everything downstream sees the resolved mode. The default stays ``colocate``:
server mode idles GPUs on every node but the last, adds `vllm serve`'s start-up (about 150 s
before the first step, ../shared/design/gpu-facts-2026-11-25.md) and its trainer's reserved
memory grows every step, none of which a step time shows; ``auto`` is the opt-in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from hpc_grpo.config.site import CPU_MEMORY_HINT, GPU_MEMORY_HINT, SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.bounds import grpo_value
from hpc_grpo.planner.engines import SERVER_GPU_MEMORY_UTILIZATION
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory_plan import check_zero_stage, plan_memory
from hpc_grpo.planner.speed.server import ServerPlan, plan_server
from hpc_grpo.planner.topology import ServerSplit, server_split
from hpc_grpo.planner.types import LinkFigures, ModelRef


def plan_request(site: SiteProfile, spec: JobSpec, model: ModelRef, procs: int,
                 links: LinkFigures | None = None, nodes: int | None = None) -> PlanRequest:
    """The planner's view of the job; ``links``: the figures the launcher found (declared or
    measured by doctor), the rest assumed; ``nodes``: the nodes that train, where not all of
    the job's do (a dedicated server node)."""
    assert model.arch is not None
    _refuse_undeclared_memory(site)
    links = links or LinkFigures()
    return PlanRequest(
        arch=model.arch, nodes=spec.nodes if nodes is None else nodes, gpus_per_node=procs,
        gpu_memory_gib=site.gpu_memory_gib, cpu_memory_gib_per_node=site.cpu_memory_gib,
        prompt_length=grpo_value(spec, "max_prompt_length"),
        completion_length=grpo_value(spec, "max_completion_length"),
        per_device_train_batch_size=grpo_value(spec, "per_device_train_batch_size"),
        num_generations=grpo_value(spec, "num_generations"),
        gradient_accumulation_steps=grpo_value(spec, "gradient_accumulation_steps"),
        steps_per_generation=spec.grpo.get("steps_per_generation"),
        lora=spec.use_peft, lora_rank=spec.lora_r,
        lora_target_modules=tuple(spec.lora_target_modules),
        beta=float(grpo_value(spec, "beta")),
        gradient_checkpointing=bool(grpo_value(spec, "gradient_checkpointing")),
        choose_checkpointing="gradient_checkpointing" not in spec.grpo,
        tensor_parallel_size=spec.tensor_parallel_size or None,
        zero_stage=0 if spec.pure_bf16 and spec.zero_stage is None else spec.zero_stage,
        offload_optimizer=spec.offload_optimizer,
        enable_sleep_mode=spec.vllm_enable_sleep_mode,
        vllm_gpu_memory_utilization=spec.vllm_gpu_memory_utilization or None,
        pure_bf16=spec.pure_bf16, gpu_name=site.gpu_type,
        intra_node_gbs=links.intra_node_gbs, inter_node_gbs=links.inter_node_gbs,
        link_source=links.source,
    )


def _refuse_undeclared_memory(site: SiteProfile) -> None:
    """A GPU profile may leave its memory figures out (doctor and the ranks then compare
    nothing), but the memory plan sizes vLLM, ZeRO, offloads and checkpoint saves from them:
    say which profile key is missing and where its number comes from (the plan request's own
    check named cpu_memory_gib_per_node, which no profile has, and gave no hint)."""
    for key, hint in (("gpu_memory_gib", GPU_MEMORY_HINT), ("cpu_memory_gib", CPU_MEMORY_HINT)):
        if not getattr(site, key) > 0:
            raise UserError(f"site '{site.name}' does not set {key}, which the memory plan of a "
                            "GPU job needs", field=key,
                            hint=f"add {key}: to the profile: {hint}")


def check_server_zero(spec: JobSpec) -> None:
    """Server mode's trainers run the ZeRO stage the spec gives (0, bare TRL's DDP, when unset),
    with no search: refuse what the colocated plan refuses (memory_plan.py), rather than plan
    an offload the runtime would not run (no DeepSpeed block without ZeRO: engines.py)."""
    zero = spec.zero_stage
    check_zero_stage(zero)
    if spec.offload_optimizer and not zero:
        raise UserError("offload_optimizer needs DeepSpeed ZeRO, but server mode's trainers run "
                        f"zero_stage 0{' (unset)' if zero is None else ''}",
                        field="offload_optimizer", hint="add --zero-stage 3 (or 2)")


def server_plan(site: SiteProfile, spec: JobSpec, model: ModelRef, split: ServerSplit,
                links: LinkFigures | None = None) -> ServerPlan | None:
    """Server mode's memory and step plan; None on CPU sites and for an unknown architecture."""
    if site.device != "cuda" or model.arch is None:
        return None
    check_server_zero(spec)
    util = spec.vllm_gpu_memory_utilization or SERVER_GPU_MEMORY_UTILIZATION
    return plan_server(trainers_request(site, spec, model, split, links), spec.vllm_server_gpus, util,
                       spec.zero_stage or 0, across_nodes=split.push_across_nodes)


def trainers_request(site: SiteProfile, spec: JobSpec, model: ModelRef, split: ServerSplit,
              links: LinkFigures | None) -> PlanRequest:
    """The planner's view of server mode's trainers: the split's nodes and GPUs that train."""
    return plan_request(site, spec, model, len(split.trainer_gpus), links, split.trainer_nodes)


def faster_mode(colocate: PlanRequest, trainers: PlanRequest, server_gpus: int, util: float,
                zero: int, across_nodes: bool | None = None
                ) -> tuple[Literal["colocate", "server"], str]:
    """("colocate" or "server", why): server mode wherever it fits and is predicted faster, so a
    slow link never leaves the plan on a colocated layout predicted slower than server mode."""
    try:
        speed = plan_memory(colocate).speed
    except UserError:
        speed = None
    theirs = plan_server(trainers, server_gpus, util, zero, across_nodes=across_nodes)
    # tokens/s, not s/step: with the recipe's per-device batch the server's trainers train
    # fewer completions a step than the colocated ranks (1 trainer x 32 against 2 ranks x 32)
    mine = (f"{speed.step.seconds:.2f} s/step, {speed.step.tokens_per_s:,.0f} tokens/s" if speed
            else "does not fit")
    ours = f"{theirs.step.seconds:.2f} s/step, {theirs.step.tokens_per_s:,.0f} tokens/s"
    if theirs.fits and (speed is None or theirs.step.tokens_per_s > speed.step.tokens_per_s):
        return "server", f"vllm_mode auto: server ({ours} against colocate's {mine})"
    other = f"server mode's {ours}" if theirs.fits else f"server mode, which does not fit: {theirs.problem}"
    return "colocate", f"vllm_mode auto: colocate ({mine} against {other})"


def resolve_mode(site: SiteProfile, spec: JobSpec, model: ModelRef,
                 links: LinkFigures | None = None) -> tuple[JobSpec, str]:
    """``auto``: the mode predicted faster, with the line that says so; else the spec as is."""
    if spec.vllm_mode != "auto":
        return spec, ""
    colocate = replace(spec, vllm_mode="colocate")
    if site.device != "cuda" or model.arch is None or site.gpus_per_node * spec.nodes < 2:
        return colocate, "vllm_mode auto: colocate (server mode needs 2+ GPUs and a known model)"
    try:
        check_server_zero(spec)
        split = server_split(spec.nodes, site.gpus_per_node, spec.vllm_server_gpus)
    except UserError as refused:  # what server mode refuses is not a candidate
        return colocate, f"vllm_mode auto: colocate (server mode: {refused.message})"
    procs = spec.procs_per_node or site.default_procs_per_node
    util = spec.vllm_gpu_memory_utilization or SERVER_GPU_MEMORY_UTILIZATION
    mode, why = faster_mode(plan_request(site, colocate, model, procs, links),
                            trainers_request(site, spec, model, split, links),
                            spec.vllm_server_gpus, util, spec.zero_stage or 0,
                            across_nodes=split.push_across_nodes)
    return replace(spec, vllm_mode=mode), why
