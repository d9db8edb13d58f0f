"""A run's measured step time and the shape it was measured at: the rules the planner learns by.

Standard library only, like the rest of the run directory's room: the ranks' summary
(runtime/rank/observe/summary.py), ``status`` and the planner's measured figures
(runs/registry.py ``site_measurements``, planner/step_source.py and planner/timing.py) all take a
run's steady s/step from ``steady_steps`` and a run's step-time shape from ``step_shape``, so the
three cannot disagree on which steps count or which runs are alike; what one past run measured
for a plan (its steady step, slowest recent step and checkpoint seconds) is ``measure``'s.

Steady steps. Each line of metrics.jsonl carries ``step_time``: TRL's own time of the step's
``training_step`` calls (generation included, the checkpoint save and logging after it not;
the callback's wall time stands in only where TRL logs none). Each attempt's first step is left
out (WARMUP_STEPS): it pays vLLM's CUDA graph capture, torch.compile's and NCCL's first calls and
the allocator's growth, 1.5-3x a later step on the GPU runs in docs/results (the calibration
uses steps 2..N for the same reason). A resumed or requeued attempt's first step is its
checkpoint's step + 1 (restarts.jsonl ``resumed_from_step``). Only the newest attempt's steps
count, and of them the last WINDOW: run.json (the shape) is the newest attempt's, and a resume
may have changed what sets a step's time (``resume --nodes``, ``--set max_completion_length``),
so a 4-node run's steps must not be credited to the 2-node shape it resumed at; the window
keeps the ranks' summary (all of metrics.jsonl) and status and the planner (its last RECENT
lines, rundir/view.py) on the same steps. What remains is summarised by its
median, not its mean: one slow step of a short run (a save that the wall time caught, a
straggler rank, a node's hiccup) moves a mean of a few steps far and a median not at all.
Where steps alternate (steps_per_generation above gradient_accumulation_steps: only every
other step generates), the median is the more common kind's time, not the cycle's average: a
known limit, said in the docstring of planner/step_source.py. Fewer than MIN_STEADY steady steps
measure nothing.

The slowest recent step. The stop lead (planner/timing.py) must cover the step in flight when
the stop signal comes, and that step may be a generating one, slower than the median: the
slowest of the same steady steps (``SteadySteps.slowest``), not of other lines. Each attempt's
first step is left out here too: its one-off costs (graph capture, compilation, the first
collectives) fall at an attempt's start, where a time limit's signal does not (a limit about a
step long is warned of by the plan), and the collective timeout, which also takes this figure,
allows four such steps.

The shape. Two runs are alike for step time when everything that sets a step's work and its
layout is equal: the model (and LoRA, the load dtype), the device and card type, nodes x
processes per node, the vLLM engine (mode, TP, memory share, sleep mode, context, the server's
GPUs), DeepSpeed (ZeRO stage, offload), the recipe's batch and lengths (STEP_KEYS of
grpo_config, and the dataset's prompt bound), and the task: the dataset and the reward
functions, which set the completions' real lengths and the rewards' own time. Read from the run
record the plan wrote (run.json), so a new plan's shape and a past run's are made by the same
function.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir.contract import RunRecord, world_size

WARMUP_STEPS = 1  # steps at the start of each attempt left out
MIN_STEADY = 2  # steady steps needed before a run's step time counts as measured
WINDOW = 24  # the newest steady steps that count (below view.RECENT's 32 lines: repeats)

# grpo_config keys that change a step's work (batch, lengths, passes, recomputation, precision).
STEP_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
             "steps_per_generation", "generation_batch_size", "max_prompt_length",
             "max_completion_length", "num_iterations", "gradient_checkpointing", "beta",
             "bf16", "fp16", "use_liger_loss", "loss_type", "vllm_max_model_length")


@dataclass(frozen=True)
class StepShape:
    """What sets a step's time, as one comparable value (equal shapes: alike runs)."""

    model: str
    device: str
    gpu_type: str
    nodes: int
    procs_per_node: int
    engine: tuple[Any, ...]  # vLLM: enabled, mode, TP, memory share, sleep, context, server GPUs
    deepspeed: tuple[Any, ...]  # (ZeRO stage, optimizer offload), () without DeepSpeed
    model_load: tuple[Any, ...]  # dtype, attention, pure bf16, LoRA rank/modules/4-bit or ()
    grpo: tuple[tuple[str, Any], ...]  # STEP_KEYS the recipe or the plan set
    prompt_bound: int | None
    # the dataset and the rewards: the completions' real lengths and the rewards' own time
    # (a reward model, a code sandbox) differ by task, at the same bounds
    task: tuple[Any, ...] = ()

    def line(self) -> str:
        """'Qwen/Qwen2.5-0.5B on 1 x 1 H200, 16 prompts x 8 generations x 192 tokens'."""
        grpo = dict(self.grpo)
        per_rank, gens = grpo.get("per_device_train_batch_size"), grpo.get("num_generations")
        ranks = world_size(self.nodes, self.procs_per_node)
        batch = (f", {per_rank * ranks * grpo.get('gradient_accumulation_steps', 1) // gens} "
                 f"prompts x {gens} generations" if per_rank and gens else "")
        tokens = grpo.get("max_completion_length")
        return (f"{self.model} on {self.nodes} x {self.procs_per_node} "
                f"{self.gpu_type or self.device}{batch}"
                + (f" x {tokens} tokens" if tokens and batch else ""))


def step_shape(record: RunRecord) -> StepShape:
    """The record's step-time shape (the module's docstring says what is in it and why)."""
    vllm, ds, load, peft = record.vllm, record.deepspeed, record.model_load, record.peft
    server = vllm.server
    return StepShape(
        model=record.model, device=record.device, gpu_type=record.hardware.gpu_type,
        nodes=record.nodes, procs_per_node=record.procs_per_node,
        engine=(vllm.enabled, vllm.mode, vllm.tensor_parallel_size, vllm.gpu_memory_utilization,
                vllm.enable_sleep_mode, vllm.max_model_length,
                (server.node, len(server.gpus)) if server else None),
        deepspeed=(ds.zero_stage, ds.offload_optimizer) if ds else (),
        model_load=(load.dtype, load.attn_implementation, load.pure_bf16,
                    (peft.r, peft.target_modules, peft.load_in_4bit) if peft else ()),
        grpo=tuple((key, record.grpo_config[key]) for key in STEP_KEYS
                   if key in record.grpo_config),
        prompt_bound=record.dataset.max_prompt_length,
        task=(record.dataset.name, record.dataset.config, record.dataset.split,
              tuple(record.reward_funcs)))


@dataclass(frozen=True)
class SteadySteps:
    """A run's steady s/step: the median of ``count`` steps from ``first`` to ``last``, and the
    slowest of them (the lead's step in flight: the module's docstring says why)."""

    seconds: float
    count: int
    first: int
    last: int
    slowest: float

    def describe(self) -> str:
        """'median of 9 steps, 2-10' (the run's first step is not among them)."""
        return f"median of {self.count} steps, {self.first}-{self.last}"


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def steady_steps(rows: Iterable[Mapping[str, Any]],
                 resumed_from: Iterable[int | None] = ()) -> SteadySteps | None:
    """The steady s/step of metrics lines (the last line of a step wins): the newest attempt's
    steps (after the largest step an attempt resumed from, else the run's), its first
    WARMUP_STEPS left out, the last WINDOW of them, their median and their slowest; None with
    fewer than MIN_STEADY steady steps. Values of the wrong type are skipped."""
    times: dict[int, float] = {}
    for row in rows:
        step, seconds = row.get("step"), _number(row.get("step_time"))
        if isinstance(step, int) and not isinstance(step, bool) and seconds is not None:
            times[step] = seconds
    start = max((0, *(s for s in resumed_from if isinstance(s, int))))
    kept = sorted((step, seconds) for step, seconds in times.items()
                  if step > start + WARMUP_STEPS)[-WINDOW:]
    if len(kept) < MIN_STEADY:
        return None
    return SteadySteps(statistics.median(seconds for _, seconds in kept), len(kept),
                       kept[0][0], kept[-1][0], max(seconds for _, seconds in kept))


def versus(measured: float, predicted: float | None) -> str:
    """'against 0.91 predicted (-31%)', or '' without a prediction: one wording for status,
    the run's summary and the plan."""
    if not predicted:
        return ""
    return f"against {predicted:.2f} predicted ({measured / predicted - 1:+.0%})"


def measured_line(steady: SteadySteps, predicted: float | None) -> str:
    """status's and the run summary's line: 'step time: 0.63 s measured (median of 9 steps,
    2-10) against 0.91 predicted (-31%)'."""
    against = versus(steady.seconds, predicted)
    return (f"step time: {steady.seconds:.2f} s measured ({steady.describe()})"
            + (f" {against}" if against else ", no prediction (CPU site or unknown model)"))


@dataclass(frozen=True)
class MeasuredStep:
    """What one past run measured at its shape, as the launcher hands it to the planner: the
    steady s/step (the plan's step time, planner/step_source.py), the slowest of those steps
    and the checkpoint's seconds (the stop lead and the collective timeout, planner/timing.py).
    A run measures its shape once it has steady steps; ``checkpoint_s`` is None where it never
    saved (the lead then stays the profile's)."""

    shape: StepShape
    steady: SteadySteps
    run_id: str
    predicted: float | None = None  # what that run's plan predicted, where it recorded one
    checkpoint_s: float | None = None  # state.json's checkpoint_seconds: a whole save's time


def measure(record: RunRecord, run_id: str, rows: Iterable[Mapping[str, Any]],
            resumed_from: Iterable[int | None], checkpoint_seconds: float | None
            ) -> MeasuredStep | None:
    """What a past run (its record, last metrics lines, restarts' resumed-from steps and
    state.json's checkpoint_seconds) measured at its shape; None without steady steps.

    ``checkpoint_seconds`` is the whole save (state.json keeps that meaning for a save marked
    complete later, in the background): what a stop's save costs before the job may end."""
    steady = steady_steps(rows, resumed_from)
    if steady is None:
        return None
    return MeasuredStep(step_shape(record), steady, run_id, record.predicted_step_s,
                        _number(checkpoint_seconds))


def measured_at(shape: StepShape, measured: Iterable[MeasuredStep]) -> MeasuredStep | None:
    """The newest measurement of ``shape`` (``measured`` comes newest first): the one past run
    the plan's step time and its stop lead are both taken from."""
    return next((m for m in measured if m.shape == shape), None)
