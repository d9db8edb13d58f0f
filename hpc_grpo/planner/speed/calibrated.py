"""Where the step-time model has been held to a measurement: its calibrated range, as data.

The calibration set is tests/unit/planner/calibration_cases.py CASES (every saved GPU
measurement of a layout, docs/results and docs/benchmarks.md); CALIBRATED is that set grouped by
what changes a step's make-up most: the card, the model's size, nodes x GPUs per node (trainers
per node in server mode) and the mode; each group with the completion lengths and per-GPU
batches its runs had. tests/unit/planner/test_speed_calibrated_range.py rebuilds the groups from
CASES and must find this table, so a new calibration case that widens the range fails there
until it is entered here.

A prediction is inside the range when a group has its card, a model within MODEL_SPREAD of its
size, its nodes x GPUs and mode, and the completion length and per-GPU batch lie within the
group's. Anything else is an extrapolation, and the plan says so: 0.5B on one H200 with 128
completions of 192 tokens (issue #58) has no group (0.5B was measured on two GPUs only) and its
predicted 0.91 s/step was 0.61-0.65 measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.speed.hardware_figures import card

# A model's parameters within 30 % of a measured one's: the same size. The calibration ran the
# built-in shapes (rundir/shapes.py), whose 32k vocabulary leaves them 13-28 % smaller than the
# Qwen2.5 models of their names (0.39 against 0.49B, 1.36 against 1.54B, 6.64 against 7.62B);
# the sizes measured are 3.5x and 4.9x apart, so no model is near two of them.
MODEL_SPREAD = 0.30


@dataclass(frozen=True)
class Group:
    """Calibration runs of one card, model size, layout and mode, and their batch range."""

    card: str
    params_b: float  # parameters, billions (the built-in shape's count)
    nodes: int
    gpus: int  # GPUs (ranks) per node; server mode: trainers per node
    server: bool
    completion: tuple[int, int]  # shortest and longest max_completion_length measured
    per_device: tuple[int, int]  # smallest and largest per_device_train_batch_size measured

    def line(self) -> str:
        return (f"{self.params_b:g}B on {self.nodes} x {self.gpus} {self.card}"
                f"{' server mode' if self.server else ''}")


_05, _15, _7 = 0.387, 1.361, 6.643  # qwen2-0.5b, -1.5b, -7b (rundir/shapes.py), billions
CALIBRATED = (
    Group("H100", _05, 1, 1, True, (256, 256), (64, 64)),
    Group("H100", _05, 1, 2, False, (256, 256), (32, 32)),
    Group("H100", _15, 1, 1, True, (256, 256), (64, 64)),
    Group("H100", _15, 1, 2, False, (256, 256), (32, 32)),
    Group("H100", _15, 2, 1, False, (128, 256), (8, 32)),
    Group("H100", _7, 1, 1, True, (256, 256), (64, 64)),
    Group("H100", _7, 1, 2, False, (64, 256), (8, 32)),
    Group("H200", _05, 1, 1, True, (256, 256), (64, 64)),
    Group("H200", _05, 1, 2, False, (256, 256), (32, 32)),
    Group("H200", _15, 1, 1, False, (64, 64), (8, 8)),
    Group("H200", _15, 1, 1, True, (256, 256), (64, 64)),
    Group("H200", _15, 1, 2, False, (256, 256), (32, 32)),
    Group("H200", _15, 2, 1, False, (128, 256), (8, 32)),
    Group("H200", _7, 1, 1, False, (64, 256), (8, 32)),
    Group("H200", _7, 1, 2, False, (64, 64), (8, 8)),
)


def _same_size(params: int, params_b: float) -> bool:
    return abs(params / 1e9 / params_b - 1) <= MODEL_SPREAD


def outside(req: PlanRequest, server: bool) -> str:
    """'' where a calibration group covers the request, else why it is an extrapolation."""
    gpu = card(req)
    if gpu.assumed:
        return f"the card ({req.gpu_name}) is not one the model was measured on (H100, H200)"
    size = f"{req.arch.num_params / 1e9:.2g}B"
    mode = " server mode" if server else ""
    groups = [g for g in CALIBRATED if g.card == gpu.kind and g.server == server
              and _same_size(req.arch.num_params, g.params_b)
              and (g.nodes, g.gpus) == (req.nodes, req.gpus_per_node)]
    if not groups:
        return f"no calibration run of {size} on {req.nodes} x {req.gpus_per_node} {gpu.kind}{mode}"
    length, batch = req.completion_length, req.per_device_train_batch_size
    if any(g.completion[0] <= length <= g.completion[1]
           and g.per_device[0] <= batch <= g.per_device[1] for g in groups):
        return ""
    measured = "; ".join(f"{g.completion[0]}-{g.completion[1]} tokens, {g.per_device[0]}-"
                         f"{g.per_device[1]} sequences a GPU" for g in groups)
    return (f"{size} on {req.nodes} x {req.gpus_per_node} {gpu.kind}{mode} was measured at "
            f"{measured}; this plan has {length} tokens, {batch} sequences a GPU")
