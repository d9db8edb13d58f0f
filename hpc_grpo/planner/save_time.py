"""How long one checkpoint's save takes, against the warning a stop gets and the training time.

Pure: the checkpoint's size (checkpoint_size.py), the write bandwidth the launcher found
(types.WriteFigure, None: assumed), the step time and the job's limits come in as values.

Assumptions, each stated where plan prints the figure:

* A save takes the busiest node's bytes over the output file system's write bandwidth per node,
  every rank of the node writing its part at once (``busiest_node_bytes``: the first node, its
  ranks' optimizer partitions and rank 0's own files). The device-to-host copy and
  serialization are not counted: DeepSpeed's write on two H200 ranks of a host ran at 1.0-1.3
  GB/s a rank, every part of the save included (docs/benchmarks.md, 2026-11-28), so a
  declared figure above what the ranks can serialize is an optimistic one.
* Where the bandwidth is neither declared (``output_write_gbs``) nor measured (``hpc-grpo doctor
  --output-bandwidth``), ``ASSUMED_WRITE_GBS`` a node: the host measured above, two ranks at
  1.0 GB/s each, the low end, on local NVMe. A shared Lustre or GPFS can be faster or slower.
* A stop (the signal before the time limit, or a preemption within GraceTime) needs the step in
  flight, the save with half of it again, and 30 s (timing.lead_needed, the measured lead's rule).
* Periodic saves come every ``save_steps`` steps (hpc-grpo's default where the recipe is silent):
  the share of training time spent saving is save / (save_steps x step). With ``async_save``
  (runtime/rank/checkpoints/background_save.py) training holds only the copy of each rank's
  state into host memory, not counted here, and the write goes on beside the next steps; a
  stop's save is still written at once (the ranks exit after it) and gives a write in flight up
  rather than finish it (runtime/rank/checkpoints/marker.py ``abandon``), so the lead is
  unchanged.
  The background writer holds at most half the memory available to the job a node
  (``CHECKPOINT_HOST_FRACTION``, the runtime's own share): a node's bytes past it are written
  at once. A preemption whose stop save completes loses no step; one that cannot save
  (GraceTime too short, a node failure) loses the steps since the last periodic save:
  save_steps / 2 on average, save_steps at most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpc_grpo.config.site import SiteProfile, minutes
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.checkpoint_size import CheckpointSize, busiest_node_bytes
from hpc_grpo.planner.memory_plan import MemoryPlan
from hpc_grpo.planner.save_verdicts import SaveRequest, periodic_warnings, verdicts
from hpc_grpo.planner.speed.server import ServerPlan
from hpc_grpo.planner.timing import MARGIN_S, SAVE_MARGIN, lead_needed
from hpc_grpo.planner.types import WriteFigure
from hpc_grpo.rundir.contract import DEFAULT_SAVE_STEPS

ASSUMED_WRITE_GBS = 2.0
ASSUMED_SOURCE = ("assumed, neither declared nor measured: two ranks of one host at 1.0 GB/s "
                  "each, DeepSpeed's partition write to local NVMe (docs/benchmarks.md), Lustre "
                  "and GPFS vary either way; `hpc-grpo doctor --site {site} --output-bandwidth` "
                  "measures it, or declare output_write_gbs")


@dataclass(frozen=True)
class SaveTime:
    """One save's predicted time and what follows from it; ``problem`` refuses submit."""

    node_bytes: int
    gbs: float
    source: str
    kind: str  # "declared", "measured" (WriteFigure.kind) or "assumed"
    seconds: float
    step_s: float
    step_source: str
    needed_s: int
    lead_s: int
    grace_s: int | None
    save_steps: int | None
    problem: str
    warnings: tuple[str, ...]
    async_save: bool = False

    @property
    def known(self) -> bool:
        """Declared or measured: a verdict may refuse."""
        return self.kind != "assumed"

    @property
    def saving_fraction(self) -> float | None:
        """The share of training time spent in periodic saves; None where unknown."""
        if not self.save_steps or self.step_s <= 0:
            return None
        return self.seconds / (self.save_steps * self.step_s)

    def to_dict(self) -> dict[str, Any]:
        fraction = self.saving_fraction
        return {"node_gb": round(self.node_bytes / 1e9, 2), "write_gbs_per_node": self.gbs,
                "write_source": self.source, "write_known": self.known,
                "save_s": round(self.seconds, 1), "step_s": round(self.step_s, 2),
                "step_source": self.step_source, "lead_needed_s": self.needed_s,
                "signal_lead_s": self.lead_s, "grace_time_s": self.grace_s,
                "save_steps": self.save_steps,
                "saving_fraction": None if fraction is None else round(fraction, 5),
                "async_save": self.async_save,
                "preemption_steps_lost": self.steps_lost(), "problem": self.problem,
                "warnings": list(self.warnings), "lines": self.lines()}

    def steps_lost(self) -> dict[str, float] | None:
        """What a preemption without a stop save loses: half of save_steps on average, all at most."""
        return None if not self.save_steps else {"mean": self.save_steps / 2,
                                                 "most": self.save_steps}

    def lines(self) -> list[str]:
        """What plan prints, one line each."""
        head = (f"save: {self.node_bytes / 1e9:.1f} GB on the busiest node at {self.gbs:g} GB/s "
                f"a node ({self.source}): {self.seconds:.1f} s a save")
        step = f"step {self.step_s:.1f} s ({self.step_source})" if self.step_s else \
            "step unknown (counted as 0)"
        stop = (f"stop: needs {self.needed_s} s = {step} + {SAVE_MARGIN:g} x save "
                f"{self.seconds:.1f} s + {MARGIN_S} s; signal lead {self.lead_s} s")
        if self.grace_s is not None:
            stop += f", GraceTime {self.grace_s} s"
        within = min(self.lead_s, self.grace_s or self.lead_s)
        stop += (": not judged without a step time (none predicted, none measured yet)"
                 if not self.step_s else f": fits, {within - self.needed_s} s to spare"
                 if self.needed_s <= within else ": does not fit (warning below)")
        lines = [head, stop]
        fraction = self.saving_fraction
        if self.save_steps is None:
            lines.append("periodic saves: none (save_strategy is not \"steps\"): a preemption "
                         "without a stop save loses every step since the start or the last stop")
        else:
            every = f"every {self.save_steps} steps"
            if fraction is not None:
                every += f" ({self.save_steps * self.step_s / 60:.1f} min of training): "
                every += (f"written in the background (async_save): training holds only the "
                          f"copy into host memory, the {self.seconds:.1f} s write ({100 * fraction:.2f}%"
                          " of training time if written at once) goes on beside the steps"
                          if self.async_save else
                          f"{100 * fraction:.2f}% of training time spent saving")
            elif self.async_save:
                every += ", written in the background (async_save)"
            lines.append(f"periodic saves: {every}; a preemption without a stop save loses "
                         f"{self.save_steps / 2:g} steps on average, {self.save_steps} at most")
        return lines


def predict_save(req: SaveRequest) -> SaveTime:
    """The save's time at the bandwidth found (or assumed) and the verdicts on it."""
    gbs, source = (req.write.gbs_per_node, req.write.source) if req.write else \
        (ASSUMED_WRITE_GBS, ASSUMED_SOURCE.format(site=req.site_name or "SITE"))
    node_bytes = busiest_node_bytes(req.size, req.world_size, req.procs_per_node)
    seconds = node_bytes / (gbs * 1e9)
    needed = lead_needed(req.step_s, seconds)
    problem, warnings = verdicts(req, gbs, node_bytes, needed)
    warnings += periodic_warnings(req, node_bytes, seconds)
    return SaveTime(node_bytes, gbs, source, req.write.kind if req.write else "assumed", seconds,
                    req.step_s,
                    req.step_source, needed, req.lead_s, req.grace_s, req.save_steps, problem,
                    tuple(warnings), req.async_save)


def refuse_slow_save(save: SaveTime | None) -> None:
    """Submit and resume: a stop save that can never finish within the site's limits, at a
    declared or measured bandwidth, is not queued."""
    if save is not None and save.problem:
        raise UserError(f"save time: {save.problem}", field="output_write_gbs",
                        hint="fewer bytes a node (LoRA, more nodes), a faster output root, or a "
                             "partition whose GraceTime covers the save; if the bandwidth is "
                             "wrong, measure it again (doctor --output-bandwidth) or correct "
                             "output_write_gbs")


def periodic_save_steps(grpo: dict[str, Any]) -> int | None:
    """The steps between periodic saves: save_steps (a fraction of max_steps below 1) where
    save_strategy is "steps"; None for "no", "epoch" or a fraction of an unknown length."""
    if str(grpo.get("save_strategy", "steps")).lower() != "steps":
        return None
    every = float(grpo.get("save_steps", DEFAULT_SAVE_STEPS))
    if every >= 1:
        return int(every)
    total = int(grpo.get("max_steps", -1) or -1)
    return max(1, math.ceil(every * total)) if total > 0 else None


def step_time(memory: MemoryPlan | None, served: ServerPlan | None) -> tuple[float, str]:
    """The predicted step a save is weighed against, else (0, ""): a measured one comes first
    (step_source.py ``for_save``), from the same past run as the lead's timings."""
    if memory is not None and memory.speed is not None:
        return memory.speed.step.seconds, "predicted"
    if served is not None:
        return served.step.seconds, "predicted"
    return 0.0, ""


def plan_save(site: SiteProfile, spec: JobSpec, size: CheckpointSize | None,
              ranks: tuple[int, int], write: WriteFigure | None, step: tuple[float, str],
              lead_s: int, time_min: int) -> SaveTime | None:
    """The plan's save step (``ranks``: world size, processes per node); None without a
    checkpoint size (an unknown architecture)."""
    if size is None:
        return None
    return predict_save(SaveRequest(
        size, *ranks, write, step[0], step[1], lead_s, time_min * 60,
        minutes(site.max_time, "max_time") * 60, site.grace_time_s,
        periodic_save_steps(spec.grpo), site.name, spec.async_save, site.cpu_memory_gib))
