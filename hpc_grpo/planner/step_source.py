"""The plan's step time: measured on this site where a past run had the plan's shape, else the
model's prediction, marked as an extrapolation outside its calibrated range (issue #58).

Pure: the launcher hands in what the site's past runs measured (``MeasuredStep`` values, read
through the run directory's typed reads, runs/registry.py ``site_measurements``); the plan takes
the newest of its shape (rundir/steps.py ``step_shape``: the one definition of "alike";
``measured_at``: the same run its stop lead is sized by, planner/timing.py) and this module
keeps the prediction beside it. A measured figure is a past run's median of its steady steps
(rundir/steps.py ``steady_steps``: each attempt's first step left out); where only every other
step generates (steps_per_generation above gradient accumulation) it is the more common kind's
time, not the cycle's mean. The prediction stays what the layout was chosen by: the
measurement changes the figure shown and recorded, not the choice among layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.modes import plan_request, trainers_request
from hpc_grpo.planner.speed.calibrated import outside
from hpc_grpo.planner.types import LinkFigures
from hpc_grpo.rundir.steps import MeasuredStep, versus

if TYPE_CHECKING:  # job.py imports this module: the plan's type only
    from hpc_grpo.planner.job import JobPlan


@dataclass(frozen=True)
class StepTimePlan:
    """The s/step the plan goes by and where it came from."""

    seconds: float
    source: str  # "measured" or "predicted"
    predicted: float | None = None  # the model's figure (None on a CPU site or unknown model)
    measured_by: str = ""  # the run whose steady steps measured it
    steady: str = ""  # which steps: "median of 9 steps, 2-10"
    extrapolation: str = ""  # why the prediction is outside the calibrated range ("" inside)

    def line(self) -> str:
        """The plan's one line: 'step time: 0.63 s measured on this site by run X (...)'."""
        if self.source == "measured":
            against = versus(self.seconds, self.predicted) or "no prediction on this site"
            return (f"step time: {self.seconds:.2f} s measured on this site by run "
                    f"{self.measured_by} ({self.steady}; {against})")
        if self.extrapolation:
            return (f"step time: {self.seconds:.2f} s predicted, an extrapolation: "
                    f"{self.extrapolation} (planner/speed/calibrated.py)")
        return f"step time: {self.seconds:.2f} s predicted, inside the calibrated range"

    def to_dict(self) -> dict[str, Any]:
        return {"s_per_step": round(self.seconds, 3), "source": self.source,
                "predicted_s_per_step": None if self.predicted is None else round(self.predicted, 3),
                "measured_by": self.measured_by or None, "steady_steps": self.steady or None,
                "extrapolation": self.extrapolation or None, "line": self.line()}


def plan_step(predicted: float | None, req: PlanRequest | None, server: bool,
              found: MeasuredStep | None) -> StepTimePlan | None:
    """The measurement of the plan's shape (``found``, rundir/steps.py ``measured_at``), else
    the prediction with its calibration verdict (``req``: the request it was made from), else
    None."""
    if found is not None:
        return StepTimePlan(found.steady.seconds, "measured", predicted, found.run_id,
                            found.steady.describe())
    if predicted is None:
        return None
    return StepTimePlan(predicted, "predicted", predicted,
                        extrapolation=outside(req, server) if req is not None else "")


def for_save(step: StepTimePlan | None, otherwise: tuple[float, str]) -> tuple[float, str]:
    """The step a save is weighed against (save_time.py): the measured one where there is one,
    else ``otherwise`` (the prediction, else none)."""
    if step is not None and step.source == "measured":
        return step.seconds, f"measured by {step.measured_by}"
    return otherwise


def learnt_step(plan: JobPlan, links: LinkFigures | None,
                found: MeasuredStep | None) -> StepTimePlan | None:
    """The plan's step time (``plan_step``) from the measurement of its record's shape
    (``found``) and its predicted step: the colocated layout's, else server mode's, else none
    (a CPU site, an unknown model)."""
    predicted, req = None, None
    if plan.memory is not None and plan.memory.speed is not None:
        predicted = plan.memory.speed.step.seconds
        req = plan_request(plan.site, plan.spec, plan.model, plan.procs_per_node, links)
    elif plan.server_plan is not None and plan.server is not None:
        predicted = plan.server_plan.step.seconds
        req = trainers_request(plan.site, plan.spec, plan.model, plan.server, links)
    return plan_step(predicted, req, plan.server is not None, found)
