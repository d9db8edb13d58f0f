"""The step-time model's calibrated range (planner/speed/calibrated.py) is the calibration set's:
rebuilt here from calibration_cases.CASES, it must be the table, and every case lies inside it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.speed.calibrated import CALIBRATED, Group, outside
from hpc_grpo.planner.speed.hardware_figures import card
from tests.unit.planner.calibration_cases import CASES, H200, Case


def _groups() -> set[Group]:
    found: dict[tuple[str, str, int, int, bool], list[Case]] = {}
    for case in CASES:
        key = (card(case.request()).kind, case.shape, case.nodes, case.gpus, case.server)
        found.setdefault(key, []).append(case)
    groups = set()
    for (kind, shape, nodes, gpus, server), cases in found.items():
        arch = builtin_arch(shape)
        assert arch is not None
        lengths, batches = [c.completion for c in cases], [c.per_device for c in cases]
        groups.add(Group(kind, round(arch.num_params / 1e9, 3), nodes, gpus, server,
                         (min(lengths), max(lengths)), (min(batches), max(batches))))
    return groups


def test_the_table_is_the_calibration_sets_groups() -> None:
    assert set(CALIBRATED) == _groups()
    assert len(CALIBRATED) == len(set(CALIBRATED))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_calibration_case_is_inside(case: Case) -> None:
    assert outside(case.request(), case.server) == ""


def _issue_58() -> Case:
    """0.5B on one H200, 16 prompts x 8 generations x 192 tokens: 0.91 predicted, 0.61-0.65
    measured (issue #58)."""
    return Case("issue 58", lambda: 0.63, "qwen2-0.5b", H200, 128, 192)


def test_the_issue_58_shape_is_an_extrapolation() -> None:
    case = _issue_58()
    assert outside(case.request(), False) == "no calibration run of 0.39B on 1 x 1 H200"


def test_a_length_or_batch_outside_a_groups_range_is_an_extrapolation() -> None:
    inside = next(c for c in CASES if c.name == "h200 0.5B colocate TP1xDP2")
    longer = replace(inside, completion=1024)
    says = outside(longer.request(), False)
    assert says.startswith("0.39B on 1 x 2 H200 was measured at 256-256 tokens, 32-32 sequences")
    assert says.endswith("this plan has 1024 tokens, 32 sequences a GPU")
    assert outside(replace(inside, per_device=8).request(), False) != ""
    assert outside(inside.request(), True) != ""  # server mode: its own groups


def test_an_unknown_card_is_an_extrapolation() -> None:
    req = replace(_issue_58().request(), gpu_name="A100-SXM4-80GB")
    assert "not one the model was measured on" in outside(req, False)
