"""The plan's step time (planner/step_source.py, issue #58): measured on this site by a past run
of the plan's shape, else predicted, and said to be an extrapolation outside the calibrated
range; in the plan's report, plan.txt's summary and run.json's prediction."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.planner import lookup_model
from hpc_grpo.planner.job import JobPlan, build_plan
from hpc_grpo.planner.report import plan_report
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.rundir.steps import MeasuredStep, SteadySteps, step_shape
from hpc_grpo.scheduler.render import summary_text

MODEL = "Qwen/Qwen2.5-0.5B"


def _plan(gpus: int = 1, measured: tuple[MeasuredStep, ...] = (), **grpo: Any) -> JobPlan:
    """0.5B on an H200 node of ``gpus`` GPUs; by default issue #58's shape: 16 prompts x 8
    generations x 192 tokens on one GPU."""
    site = replace(find_site("sandbox-gpu"), name="h200-site", gpu_type="H200",
                   gpu_memory_gib=139.0, gpus_per_node=gpus, procs_per_node=gpus)
    recipe = {"model_name_or_path": MODEL, "nodes": 1, "per_device_train_batch_size": 128,
              "num_generations": 8, "max_completion_length": 192, **grpo}
    spec = build_spec(recipe, {}, {}, site)
    return build_plan(site, spec, ModelRef(MODEL, local=False, arch=lookup_model(MODEL)),
                      measured=measured)


def _measured(plan: JobPlan, seconds: float = 0.63, run_id: str = "grpo-qwen2-5-0-5b-0001"
              ) -> MeasuredStep:
    shape = step_shape(plan.run_record("x", "/runs/x"))
    return MeasuredStep(shape, SteadySteps(seconds, 9, 2, 10, seconds), run_id, 0.91)


def test_outside_the_calibrated_range_the_prediction_says_it_is_an_extrapolation() -> None:
    plan = _plan()
    step = plan.step_time
    assert step is not None and step.source == "predicted" and step.measured_by == ""
    assert plan.memory is not None and plan.memory.speed is not None
    assert step.seconds == plan.memory.speed.step.seconds
    assert step.line() == (f"step time: {step.seconds:.2f} s predicted, an extrapolation: no "
                           "calibration run of 0.49B on 1 x 1 H200 (planner/speed/calibrated.py)")
    report = plan_report(plan)["step_time"]
    assert report["source"] == "predicted" and report["extrapolation"].startswith("no calibration")
    assert f"# {step.line()}\n" in summary_text(plan)  # plan.txt
    assert plan.run_record("r", "/runs/r").predicted_step_s == step.seconds  # run.json


def test_inside_the_calibrated_range_the_prediction_says_so() -> None:
    plan = _plan(gpus=2, per_device_train_batch_size=32, max_completion_length=256)
    step = plan.step_time
    assert step is not None and (step.source, step.extrapolation) == ("predicted", "")
    assert step.line() == f"step time: {step.seconds:.2f} s predicted, inside the calibrated range"


def test_a_past_run_of_the_same_shape_on_the_site_gives_the_measured_figure() -> None:
    first = _plan()
    assert first.step_time is not None
    predicted = first.step_time.seconds
    other = _measured(_plan(max_completion_length=256), 0.8, "grpo-other-0001")
    plan = _plan(measured=(other, _measured(first), _measured(first, 0.7, "older-0001")))
    step = plan.step_time
    assert step is not None
    assert (step.source, step.seconds, step.measured_by) == ("measured", 0.63,
                                                             "grpo-qwen2-5-0-5b-0001")
    assert step.line() == ("step time: 0.63 s measured on this site by run grpo-qwen2-5-0-5b-0001 "
                           f"(median of 9 steps, 2-10; against {predicted:.2f} predicted "
                           f"({0.63 / predicted - 1:+.0%}))")
    assert plan_report(plan)["step_time"]["predicted_s_per_step"] == round(predicted, 3)
    assert plan.save is not None and first.save is not None  # the save is weighed against it
    assert (plan.save.step_s, plan.save.step_source) == (0.63, "measured by grpo-qwen2-5-0-5b-0001")
    assert (first.save.step_s, first.save.step_source) == (predicted, "predicted")
    # run.json keeps the model's prediction: the next run is measured against it again
    assert plan.run_record("r", "/runs/r").predicted_step_s == predicted
    assert _plan(measured=(other,)).step_time.source == "predicted"  # type: ignore[union-attr]


def test_a_cpu_site_measures_but_predicts_nothing() -> None:
    site = find_site("local")
    spec = build_spec({"model_name_or_path": "builtin:tiny"}, {}, {}, site)
    model = ModelRef("builtin:tiny", local=True, arch=None)
    assert build_plan(site, spec, model).step_time is None
    once = build_plan(site, spec, model)
    shape = step_shape(once.run_record("x", "/x"))
    learnt = build_plan(site, spec, model,
                        measured=(MeasuredStep(shape, SteadySteps(0.4, 2, 2, 3, 0.4), "tiny-0001"),))
    assert learnt.step_time is not None and learnt.step_time.line() == (
        "step time: 0.40 s measured on this site by run tiny-0001 (median of 2 steps, 2-3; no "
        "prediction on this site)")
