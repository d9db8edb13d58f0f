"""Turn a site profile and a job spec into one resolved plan: the single source of truth.

``render``, ``submit``, ``plan`` and the ranks (through the run record it builds) all read this
plan; nothing downstream re-decides TP size, ZeRO stage or vLLM memory. Pure: values in, values
out. ``build_plan`` is a short chain of steps: limits, process layout, batch rules, memory plan,
then the typed vLLM and DeepSpeed plans (the run record's own blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpc_grpo.config.site import SiteProfile, minutes
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner import MemoryPlan, plan_memory
from hpc_grpo.planner.batch import check_spec_batches
from hpc_grpo.planner.blocks import dataset_block, default_name, hardware_block, peft_block, save_record
from hpc_grpo.planner.bounds import (  # noqa: F401 - BUILTIN_PROMPT_TOKENS, TRL_DEFAULTS: re-exported
    BUILTIN_PROMPT_TOKENS,
    TRL_DEFAULTS,
    grpo_value,
    prompt_bound,
    split_pinned,
)
from hpc_grpo.planner.checkpoint_fit import check_checkpoints
from hpc_grpo.planner.checkpoint_size import CheckpointSize
from hpc_grpo.planner.engines import deepspeed_plan, vllm_plan
from hpc_grpo.planner.modes import plan_request, resolve_mode, server_plan
from hpc_grpo.planner.precision import context_check, loaded_block, precision
from hpc_grpo.planner.save_time import SaveTime, plan_save, step_time
from hpc_grpo.planner.speed.choose import MEASURED_CKPT
from hpc_grpo.planner.speed.server import ServerPlan
from hpc_grpo.planner.step_source import StepTimePlan, for_save, learnt_step
from hpc_grpo.planner.timeouts import collective_timeout
from hpc_grpo.planner.timing import lead_timings, limit_warnings, signal_lead
from hpc_grpo.planner.topology import (
    ServerSplit,
    check_rank_seeds,
    layout_notes,
    processes,
    rank_table,
    training_nodes,
)
from hpc_grpo.planner.types import LinkFigures, ModelRef, WriteFigure
from hpc_grpo.rundir.contract import (
    DeepSpeedBlock,
    RankRow,
    RunRecord,
    StopBlock,
    VllmBlock,
    WatchdogBlock,
    dist_backend,
    recorded_stop_signals,
    world_size,
)
from hpc_grpo.rundir.steps import MeasuredStep, measured_at, step_shape


@dataclass(frozen=True)
class JobPlan:
    site: SiteProfile
    spec: JobSpec
    model: ModelRef
    device: str
    procs_per_node: int
    ranks: tuple[RankRow, ...]
    vllm: VllmBlock
    deepspeed: DeepSpeedBlock | None
    memory: MemoryPlan | None
    server: ServerSplit | None
    time_min: int
    job_name: str
    warnings: tuple[str, ...]
    signal_lead_s: int = 0
    signal_lead_reason: str = ""
    dataset_commit: str = ""  # a hub dataset staged in the site's hf_home: the pinned commit
    collective_timeout_s: int = 0
    collective_timeout_reason: str = ""
    checkpoint: CheckpointSize | None = None  # one checkpoint's files (planner/checkpoint_fit.py)
    checkpoint_problem: str = ""  # why no checkpoint fits the output file system; submit refuses
    precision: str = ""  # what the ranks train in (precision(): the ranks' own load_dtype)
    changes: tuple[str, ...] = ()  # what the plan changed from the recipe, one line each, and why
    server_plan: ServerPlan | None = None  # server mode: trainer/server memory and step
    save_total_limit: int | None = None  # sized by the plan where the recipe leaves it unset
    save: SaveTime | None = None  # one save's predicted time against the lead (save_time.py)
    # the spec as asked, before the plan's own choices went into it (spec.json keeps this, so a
    # resume plans those choices again instead of reading them back as the user's)
    requested: JobSpec | None = None
    step_time: StepTimePlan | None = None  # measured on the site, else predicted (step_source.py)

    @property
    def nodes(self) -> int:  # the allocation's (sbatch --nodes), a dedicated server node included
        return self.spec.nodes

    @property
    def training_nodes(self) -> int:  # those that run torchrun: all but a dedicated server node
        return training_nodes(self.spec.nodes, self.server)

    @property
    def world_size(self) -> int:
        return world_size(self.training_nodes, self.procs_per_node)

    @property
    def tensor_parallel_size(self) -> int:
        return self.vllm.tensor_parallel_size

    @property
    def stop(self) -> StopBlock:
        """The signals the run stops on (run.json's stop block; the script forwards them)."""
        return StopBlock(recorded_stop_signals(self.site.requeue_signal))

    def run_record(self, run_id: str, run_dir: str) -> RunRecord:
        """``run.json``: everything the ranks need (docs/run-directory.md)."""
        return RunRecord(
            run_id=run_id, run_dir=run_dir, payload=self.spec.payload, model=self.model.source,
            dataset=dataset_block(self.spec, prompt_bound(self.spec), self.dataset_commit),
            reward_funcs=tuple(self.spec.reward_funcs),
            reward_weights=tuple(self.spec.reward_weights),
            reward_kwargs=dict(self.spec.reward_kwargs),
            model_load=loaded_block(self.spec, self.model, self.site, self.deepspeed),
            peft=peft_block(self.spec), seed=self.spec.seed, nodes=self.training_nodes,
            min_nodes=self.spec.min_nodes, procs_per_node=self.procs_per_node, device=self.device,
            dist_backend=dist_backend(self.device),
            grpo_config={**self.spec.grpo, **({"save_total_limit": self.save_total_limit}
                                              if self.save_total_limit else {}),
                         **split_pinned(self.spec)},
            vllm=self.vllm, deepspeed=self.deepspeed,
            stop=self.stop, ranks=self.ranks,
            site=self.site.name, scheduler=self.site.scheduler, hardware=hardware_block(self.site),
            max_requeues=self.site.max_requeues, signal_lead_s=self.signal_lead_s,
            time_min=self.time_min, memory_plan=self.memory.to_dict() if self.memory else None,
            watchdog=WatchdogBlock(startup_s=self.site.watchdog_startup_s,
                                   min_s=self.site.watchdog_min_s),
            collective_timeout_s=self.collective_timeout_s,
            checkpoint_bytes=self.checkpoint.one if self.checkpoint else 0,
            async_save=self.spec.async_save,
            predicted_step_s=self.step_time.predicted if self.step_time else None,
            **save_record(self.save))


def _check_limits(site: SiteProfile, spec: JobSpec, time_min: int) -> None:
    """Refuse what the site cannot run."""
    if time_min > minutes(site.max_time, "max_time"):
        raise UserError(
            f"time limit {spec.time} exceeds the site's maximum {site.max_time}",
            field="time",
            hint=f"use --time {site.max_time} or less; requeues continue the run",
        )
    if site.max_nodes and spec.nodes > site.max_nodes:
        raise UserError(
            f"{spec.nodes} nodes requested but site '{site.name}' has {site.max_nodes}",
            field="nodes",
            hint=f"use --nodes {site.max_nodes} or fewer",
        )
    if site.scheduler == "local" and spec.nodes != 1:
        raise UserError("the local site runs one node", field="nodes", hint="use --nodes 1")


def _memory_plan(site: SiteProfile, spec: JobSpec, model: ModelRef, procs: int,
                 links: LinkFigures | None) -> MemoryPlan | None:
    """The colocated memory plan; None on CPU sites and for an unknown architecture."""
    if site.device != "cuda" or model.arch is None:
        return None
    return plan_memory(plan_request(site, spec, model, procs, links))


def _checkpointing(spec: JobSpec, memory: MemoryPlan | None,
                   changes: tuple[str, ...]) -> tuple[JobSpec, tuple[str, ...]]:
    """The plan turned gradient checkpointing off (the recipe left it to TRL's default): the
    ranks' GRPOConfig gets it through run.json's grpo_config, and the changes say why."""
    if memory is None or memory.gradient_checkpointing or "gradient_checkpointing" in spec.grpo:
        return spec, changes
    speed = memory.speed
    assert speed is not None and speed.with_checkpointing is not None
    spec = replace(spec, grpo={**spec.grpo, "gradient_checkpointing": False})
    return spec, (*changes, (
        f"gradient_checkpointing: True (TRL's default) -> False (plan: fits without recomputation, "
        f"{memory.gib('total during training'):.1f} GiB during training; predicted "
        f"{speed.step.seconds:.2f} s/step against {speed.with_checkpointing.seconds:.2f} with it; "
        f"{MEASURED_CKPT}; set gradient_checkpointing=true to keep it)"))


def build_plan(site: SiteProfile, spec: JobSpec, model: ModelRef,
               free: tuple[int | None, str] = (None, ""),
               dataset_commit: str = "", notes: tuple[str, ...] = (),
               links: LinkFigures | None = None, write: WriteFigure | None = None,
               measured: tuple[MeasuredStep, ...] = ()) -> JobPlan:
    """Check the request against the site and choose the layout; raises UserError early.
    ``free``: the output file system's free bytes and name, probed by the caller; ``notes``:
    the caller's checks' warnings, shown after the plan's own; ``links`` and ``write``: the
    link and output write bandwidths the caller found (declared or measured), None: assumed;
    ``measured``: what the site's past runs measured, one per shape, newest first
    (runs/registry.py ``site_measurements``), of which ``_measured`` takes the plan's shape's."""
    time_min = minutes(spec.time, "time")
    spec, mode_note = resolve_mode(site, spec, model, links)
    _check_limits(site, spec, time_min)
    context = context_check(spec, model.arch.max_position_embeddings if model.arch
                            else model.context)
    procs, server = processes(site, spec)
    nodes = training_nodes(spec.nodes, server)
    check_spec_batches(spec, world_size(nodes, procs))
    check_rank_seeds(spec.seed, world_size(nodes, procs))
    memory = None if server is not None else _memory_plan(site, spec, model, procs, links)
    served = server_plan(site, spec, model, server, links) if server is not None else None
    warnings = [mode_note] * bool(mode_note) + ([served.growth_warning()] if served else [])
    warnings += layout_notes(site.device, site.name, spec, memory or server)
    sequence = prompt_bound(spec) + grpo_value(spec, "max_completion_length")
    vllm = vllm_plan(site, spec, memory, server, sequence)
    deepspeed = deepspeed_plan(site.device, spec, memory)
    story, changes, pure = precision(site.device, spec, deepspeed)
    requested = spec
    spec, changes = _checkpointing(spec, memory, changes)
    checkpoint, no_fit, more, kept = check_checkpoints(site, spec, model.arch, deepspeed, memory,
                                                       world_size(nodes, procs), *free,
                                                       served=served)
    warnings += [*more, *pure]
    changes += (kept[1],) if kept and kept[1] else ()
    plan = JobPlan(
        site=site, spec=spec, model=model, device=site.device, procs_per_node=procs,
        ranks=rank_table(nodes, procs, vllm.tensor_parallel_size), vllm=vllm,
        deepspeed=deepspeed, memory=memory, server=server, checkpoint=checkpoint,
        checkpoint_problem=no_fit, time_min=time_min, job_name=spec.name or default_name(model.source),
        warnings=(*context, *warnings), dataset_commit=dataset_commit,
        precision=story, changes=changes, server_plan=served,
        save_total_limit=kept[0] if kept else None, requested=requested)
    return _measured(plan, measured, links, write, notes)


def _measured(plan: JobPlan, measured: tuple[MeasuredStep, ...], links: LinkFigures | None,
              write: WriteFigure | None, notes: tuple[str, ...]) -> JobPlan:
    """The laid-out plan's figures from the one past run of its shape (its record's, as a past
    run's is its run.json's; planner/timing.py says why the shape): the stop lead, the
    collective timeout, the step time, and the save weighed against them. The shape does not
    depend on the lead or the timeout, so the plan is laid out first."""
    site, spec = plan.site, plan.spec
    found = measured_at(step_shape(plan.run_record("", "")), measured)
    timings = lead_timings(found)
    lead, lead_reason = signal_lead(site.signal_lead_s, timings)
    timeout, timeout_reason = collective_timeout(timings, site.watchdog_startup_s,
                                                 site.watchdog_min_s, spec.grpo.get("ddp_timeout"))
    step = learnt_step(plan, links, found)
    save = plan_save(site, spec, plan.checkpoint, (plan.world_size, plan.procs_per_node), write,
                     for_save(step, step_time(plan.memory, plan.server_plan)), lead, plan.time_min)
    return replace(plan, signal_lead_s=lead, signal_lead_reason=lead_reason,
                   collective_timeout_s=timeout, collective_timeout_reason=timeout_reason,
                   step_time=step, save=save, warnings=(
                       *spec.notes, *limit_warnings(spec.time, plan.time_min, lead, timings),
                       *plan.warnings, *(save.warnings if save else ()), *notes))
