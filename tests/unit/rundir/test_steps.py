"""A run's step-time shape and its steady s/step (rundir/steps.py): the rules the planner learns
by, status shows and the run's summary writes (issue #58)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hpc_grpo.rundir.contract import DatasetBlock, DeepSpeedBlock, RunRecord, VllmBlock
from hpc_grpo.rundir.hardware import HardwareBlock
from hpc_grpo.rundir.steps import WINDOW, measured_line, steady_steps, step_shape


def _record(**over: Any) -> RunRecord:
    grpo = {"per_device_train_batch_size": 128, "num_generations": 8,
            "max_completion_length": 192, "max_steps": 20, "learning_rate": 1e-6,
            "output_dir": "/runs/a/checkpoints", "save_steps": 5}
    record = RunRecord(run_id="a", run_dir="/runs/a", model="Qwen/Qwen2.5-0.5B",
                       dataset=DatasetBlock("d", max_prompt_length=64), nodes=1, procs_per_node=1,
                       ranks=(), device="cuda", grpo_config=grpo, site="h200",
                       vllm=VllmBlock(enabled=True), deepspeed=None,
                       hardware=HardwareBlock(gpus_per_node=1, gpu_type="H200"))
    return dataclasses.replace(record, **over)


def test_what_does_not_change_a_step_leaves_the_shape_alone() -> None:
    base = _record()
    other = dataclasses.replace(base, run_id="b", run_dir="/runs/b", seed=7, time_min=30,
                                grpo_config={**base.grpo_config, "max_steps": 500,
                                             "learning_rate": 3e-6, "output_dir": "/x",
                                             "save_steps": 50})
    assert step_shape(other) == step_shape(base)
    assert step_shape(base).line() == "Qwen/Qwen2.5-0.5B on 1 x 1 H200, 16 prompts x 8 " \
                                      "generations x 192 tokens"


@pytest.mark.parametrize("over", [
    {"nodes": 2}, {"procs_per_node": 2}, {"model": "Qwen/Qwen2.5-1.5B"},
    {"hardware": HardwareBlock(gpus_per_node=1, gpu_type="H100")},
    {"deepspeed": DeepSpeedBlock(zero_stage=2)},
    {"deepspeed": DeepSpeedBlock(zero_stage=3, offload_optimizer=True)},
    {"vllm": VllmBlock(enabled=True, tensor_parallel_size=2)},
    {"vllm": VllmBlock(enabled=True, enable_sleep_mode=True)},
    {"dataset": DatasetBlock("d", max_prompt_length=512)},
    {"dataset": DatasetBlock("other/math", max_prompt_length=64)},
    {"reward_funcs": ("my_rewards:code_sandbox",)},
    {"grpo_config": {"per_device_train_batch_size": 64, "num_generations": 8,
                     "max_completion_length": 192}},
    {"grpo_config": {"per_device_train_batch_size": 128, "num_generations": 16,
                     "max_completion_length": 192}},
    {"grpo_config": {"per_device_train_batch_size": 128, "num_generations": 8,
                     "max_completion_length": 256}},
    {"grpo_config": {"per_device_train_batch_size": 128, "num_generations": 8,
                     "max_completion_length": 192, "gradient_checkpointing": False}},
], ids=lambda over: next(iter(over)))
def test_what_changes_a_step_changes_the_shape(over: dict[str, Any]) -> None:
    assert step_shape(_record(**over)) != step_shape(_record())


def _rows(times: list[float], first: int = 1) -> list[dict[str, Any]]:
    return [{"step": first + i, "step_time": t} for i, t in enumerate(times)]


def test_the_first_step_is_left_out_and_the_median_kept() -> None:
    steady = steady_steps(_rows([9.0, 0.62, 0.64, 0.63, 3.0, 0.61]))
    assert steady is not None
    assert (steady.seconds, steady.count, steady.first, steady.last) == (0.63, 5, 2, 6)
    assert steady.describe() == "median of 5 steps, 2-6"


def test_only_the_newest_attempts_steps_count_its_first_left_out() -> None:
    """A review of #58's first version: steps of an attempt before a resume at another layout
    (here 4 nodes at 10 s a step, resumed on 2 at 18 s) were credited to the new shape."""
    rows = _rows([12.0] + [10.0] * 29) + _rows([25.0] + [18.0] * 9, first=31)  # resumed from 30
    steady = steady_steps(rows, resumed_from=[30, None])
    assert steady is not None and (steady.seconds, steady.count, steady.first) == (18.0, 9, 32)
    unaware = steady_steps(rows)  # without the restart line, the first attempt's steps count
    assert unaware is not None and unaware.seconds != 18.0


def test_the_last_window_of_steps_counts_wherever_it_is_read_from() -> None:
    """summary.json reads all of metrics.jsonl, status and the planner its last lines: the same
    last WINDOW steps for all three (a review found 2.02 s against 2.69 s on a drifting run)."""
    rows = _rows([float(n) for n in range(1, 101)])
    whole, tail = steady_steps(rows), steady_steps(rows[-32:])
    assert whole == tail and whole is not None and whole.count == WINDOW


def test_too_few_steady_steps_measure_nothing_and_odd_values_are_skipped() -> None:
    assert steady_steps(_rows([4.0, 1.0])) is None  # one steady step
    assert steady_steps(_rows([4.0, 1.0, 1.0])) is not None
    odd = [{"step": 2, "step_time": "fast"}, {"step": 3, "step_time": None},
           {"step": True, "step_time": 1.0}, {"step": 4, "step_time": -1.0}]
    assert steady_steps(odd + _rows([1.0], first=5)) is None
    again = steady_steps([*_rows([1.0]), {"step": 2, "step_time": 5.0},
                          {"step": 2, "step_time": 2.0}, {"step": 3, "step_time": 2.0}])
    assert again is not None and again.seconds == 2.0  # a step's last line wins


def test_the_line_says_measured_against_predicted() -> None:
    steady = steady_steps(_rows([2.0, 0.63, 0.63, 0.63]))
    assert steady is not None
    assert measured_line(steady, 0.91) == ("step time: 0.63 s measured (median of 3 steps, "
                                           "2-4) against 0.91 predicted (-31%)")
    assert measured_line(steady, None).endswith("no prediction (CPU site or unknown model)")
