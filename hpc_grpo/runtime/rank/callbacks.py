"""Trainer callbacks on the ranks: metrics lines, a graceful stop all ranks agree on, and the
free-space check before a save (the completion marker that makes a checkpoint eligible for
resume: checkpoints/marker.py).

Imported only by the ranks (it imports torch and transformers).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.runtime.rank.checkpoints import folders
from hpc_grpo.runtime.rank.observe import memory, phases
from hpc_grpo.runtime.rank.observe.memory import GpuMemorySampler, physical_gpu
from hpc_grpo.runtime.shared.signals import StopFlag, request_reason

# TRL 1.16's names for vLLM's and the trainer's disagreement on the sampled tokens (computed
# when vllm_importance_sampling_correction is on, TRL's default) -> metrics.jsonl's names.
LOGP_DIFF = {
    "sampling/sampling_logp_difference/mean": contract.LOGP_DIFF_MEAN,
    "sampling/sampling_logp_difference/max": contract.LOGP_DIFF_MAX,
}


def dist_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def saves_at_end(args: TrainingArguments | None) -> bool:
    """False only for ``save_strategy`` "no": the run writes no periodic and no final checkpoint;
    a stop still saves (a requeue must resume, whatever the schedule)."""
    strategy = getattr(args, "save_strategy", "steps")
    return str(getattr(strategy, "value", strategy)) != "no"


class GracefulStopCallback(TrainerCallback):
    """At every step end all ranks all_reduce(MAX) their stop flag, so they stop on ONE step.

    The collective runs every step (not only when a flag is set): otherwise a rank that saw the
    signal would enter a collective its peers never join, and gloo/NCCL would abort or hang.
    A stop and the last step also log: with ``logging_steps`` > 1 the loss transformers sums
    since the previous log is in memory only, and the end-of-training summary (into which TRL
    folds its reward averages) has none. That log gathers the loss across ranks: safe, as every
    rank decides alike here.
    """

    def __init__(self, run_dir: Path, flag: StopFlag, device: torch.device) -> None:
        self.stop_file = run_dir / contract.STOP_REQUEST
        self.flag = flag
        self.device = device
        self.stopped_at: int | None = None
        self.reason: str | None = None

    def _agreed(self) -> bool:
        """Whether any rank was asked to stop (its signal, or the stop-request file); every
        rank calls it at the same point, as it is a collective."""
        if self.flag.reason is None and self.stop_file.exists():
            self.flag.reason = request_reason(rundir.read_stop_request(self.stop_file.parent))
        local = torch.tensor([1 if self.flag.reason else 0], dtype=torch.int32, device=self.device)
        if dist_ready():
            dist.all_reduce(local, op=dist.ReduceOp.MAX)
        return bool(local.item())

    def before_training(self, step: int) -> bool:
        """Every rank, once the trainer is built and before its first step: True where a stop
        came while the ranks started (a cancel before step 1). The ranks then stop without
        training a step, and save nothing: the checkpoint they resumed from (or none) stands.
        Before, the request was honoured only at the first step end: the run trained a step
        and saved checkpoint-1 after a cancel that reported success (issue #58)."""
        if not self._agreed():
            return False
        self.stopped_at = step
        self.reason = self.flag.reason or "another rank's stop request"
        print(f"[stop] before the first step (at step {step}): stopping ({self.reason})",
              flush=True)
        return True

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        stop = self._agreed()
        if state.global_step >= state.max_steps:
            # A final checkpoint makes a restart of a done run a no-op, unless the user asked for
            # no checkpoints (save_strategy "no", e.g. a benchmark: a 7B save is 60-130 s)
            control.should_save = control.should_save or saves_at_end(args)
            control.should_log = True
        if stop:
            control.should_save = True
            control.should_log = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
            self.reason = self.flag.reason or "another rank's stop request"
            print(f"[stop] step {state.global_step}: stopping ({self.reason})", flush=True)
        return control


class DiskSpaceCallback(TrainerCallback):
    """Before a save (last in the callback list, after every callback that may ask for one):
    skip it when the output file system cannot hold it. All ranks agree (all_reduce MIN), as a
    save is collective. A skipped save leaves the newest complete checkpoint as the resume
    point; the skip is one log line and state.json's checkpoint_skipped."""

    def __init__(self, run_dir: Path, planned_bytes: int, device: torch.device) -> None:
        self.run_dir = run_dir
        self.planned = planned_bytes
        self.device = device

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        return self._check(args, state, control)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        """``save_strategy: epoch`` asks for its save here, not at a step end."""
        return self._check(args, state, control)

    def _check(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl
    ) -> TrainerControl:
        if not control.should_save:
            return control
        output = Path(str(args.output_dir))
        needed = folders.bytes_needed(self.planned, output)
        free = folders.free_bytes(output)
        fits = torch.tensor([1 if needed <= free else 0], dtype=torch.int32, device=self.device)
        if dist_ready():
            dist.all_reduce(fits, op=dist.ReduceOp.MIN)
        if not int(fits.item()):
            control.should_save = False
            line = folders.skip_line(state.global_step, needed, free, output)
            print(f"[checkpoint] {line}", flush=True)
            if state.is_world_process_zero:
                rundir.update_state(self.run_dir, checkpoint_skipped=line)
        return control


def _torch_memory(nvml_used: int | None) -> dict[str, float]:
    """torch's allocator peaks (this process) next to NVML's device view. Not a split of the
    total: torch's counters include vLLM's sleep-mode pool even while it sleeps (observe/memory.py)."""
    gib = float(2**30)
    out = {"torch_alloc_peak_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
           "torch_reserved_peak_gib": round(torch.cuda.max_memory_reserved() / gib, 3)}
    if nvml_used is not None:
        out["nvml_used_gib"] = round(nvml_used / gib, 3)
    return out


class MetricsCallback(TrainerCallback):
    """Rank 0 appends one metrics.jsonl line per logged optimizer step and updates state.json."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / contract.METRICS_JSONL
        self.run_dir = run_dir
        self.last_tokens: float | None = None
        self.last_end: float | None = None
        self.wall: float | None = None
        self.memory: GpuMemorySampler | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        self.last_tokens = float(state.num_input_tokens_seen or 0)
        self.last_end = time.time()
        if torch.cuda.is_available() and state.is_world_process_zero:
            self.memory = GpuMemorySampler(physical_gpu(torch.cuda.current_device()),
                                           phase=phases.MEMORY_PHASE).start()
            if self.memory.available:  # model and vLLM engine loaded, nothing trained yet
                rundir.update_state(self.run_dir, gpu_mem_train_begin=_torch_memory(self.memory.sample()))
        return control

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        now = time.time()
        self.wall = now - self.last_end if self.last_end is not None else None
        self.last_end = now
        return control

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **_: Any,
    ) -> TrainerControl:
        # every optimizer step's log has "loss"; "reward" only a step that generated (with
        # steps_per_generation > gradient accumulation or num_iterations > 1 most do not). The
        # end-of-training summary (train_loss, train_runtime) and eval logs have neither.
        if not logs or ("reward" not in logs and "loss" not in logs):
            return control
        split = phases.STEP.take()  # on every rank, so each line covers its own steps only
        if not state.is_world_process_zero:
            return control
        step_time = logs.get("step_time") or self.wall
        # TRL logs num_tokens (its running total) only on a step that generated
        tokens = logs.get("num_tokens")
        new = None if tokens is None else float(tokens) - (self.last_tokens or 0.0)
        self.last_tokens = self.last_tokens if tokens is None else float(tokens)
        row = {
            "step": state.global_step,
            "max_steps": state.max_steps,
            "reward_mean": logs.get("reward"),
            "reward_std": logs.get("reward_std"),
            "completion_length": logs.get("completions/mean_length"),
            "step_time": step_time,
            "wall_step_time": self.wall,
            "tokens_per_s": new / step_time if step_time and new is not None else None,
            "loss": logs.get("loss"),
            "learning_rate": logs.get("learning_rate"),
            "time": time.time(),
        }
        if self.memory is not None and self.memory.available:
            row["gpu_mem_peak_gib"] = round(self.memory.peak_gib, 3)
            row["gpu_mem_peak_by_phase_gib"] = self.memory.phase_peaks_gib()  # run so far
            row.update(_torch_memory(None))
        if host := memory.host_sample(torch):
            row["host_mem_gib"] = host  # rank 0's process (rank/observe/memory.py)
        row.update({k: v for k, v in logs.items() if k.startswith("rewards/")})
        row.update({ours: logs[trl] for trl, ours in LOGP_DIFF.items() if logs.get(trl) is not None})
        if split:
            row["phases_s"] = split  # rank 0's TRL blocks since the previous line (phases.py)
        rundir.append_jsonl(self.path, row)
        rundir.update_state(self.run_dir, phase="training", step=state.global_step, max_steps=state.max_steps)
        return control
