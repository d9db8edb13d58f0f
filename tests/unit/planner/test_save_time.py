"""A checkpoint's save time (#59): the busiest node's bytes over the output file system's write
bandwidth, against the signal lead and GraceTime, and the training time periodic saves take."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.planner.checkpoint_size import (
    CheckpointRequest,
    CheckpointSize,
    busiest_node_bytes,
    size_checkpoint,
)
from hpc_grpo.planner.save_time import (
    ASSUMED_WRITE_GBS,
    SaveTime,
    periodic_save_steps,
    predict_save,
    refuse_slow_save,
)
from hpc_grpo.planner.save_verdicts import SaveRequest, fitting_bytes
from hpc_grpo.planner.timing import lead_needed
from hpc_grpo.planner.types import WriteFigure
from hpc_grpo.rundir.contract import DEFAULT_SAVE_STEPS

PARAMS_72B = 72_700_000_000


def size(zero: int = 3, world: int = 32, params: int = PARAMS_72B) -> CheckpointSize:
    return size_checkpoint(CheckpointRequest(params, params, zero, False, False, "cuda", world, 1))


def request(**kw: Any) -> SaveRequest:
    values: dict[str, Any] = dict(
        size=size(), world_size=32, procs_per_node=8, write=WriteFigure(20.0, "declared", "declared"),
        step_s=49.7, step_source="predicted", lead_s=300, time_limit_s=4 * 3600,
        max_time_s=2 * 86400, grace_s=None, save_steps=50, site_name="h100-pyxis")
    values.update(kw)
    return SaveRequest(**values)


def test_the_busiest_node_writes_its_ranks_partitions_and_rank_0s_files() -> None:
    zero3 = size()
    per_node = busiest_node_bytes(zero3, 32, 8)
    optimizer = dict(zero3.items)["DeepSpeed optimizer (fp32 master, m, v)"]
    assert optimizer == 12 * PARAMS_72B
    assert per_node == pytest.approx(optimizer / 4, rel=0.001)  # 8 of 32 ranks' partitions
    # ZeRO-2: the module states (2 B/param) are rank 0's, beside its node's partitions
    zero2 = size(zero=2)
    assert busiest_node_bytes(zero2, 32, 8) == pytest.approx(
        12 * PARAMS_72B / 4 + 2 * PARAMS_72B, rel=0.001)
    # without DeepSpeed rank 0 writes it all but the other node's RNG files
    ddp = size_checkpoint(CheckpointRequest(10**9, 10**9, 0, False, False, "cuda", 16, 1))
    assert ddp.partitioned == 16 * 2**10 * 16
    assert busiest_node_bytes(ddp, 16, 8) == ddp.one - ddp.partitioned // 2


def test_a_save_is_bytes_over_bandwidth_and_the_lead_rule_is_the_measured_ones() -> None:
    save = predict_save(request())
    assert save.seconds == pytest.approx(save.node_bytes / 20e9)
    assert save.needed_s == lead_needed(49.7, save.seconds) == int(49.7 + 1.5 * save.seconds + 30.999)
    assert (save.problem, save.warnings) == ("", ())
    assert save.saving_fraction == pytest.approx(save.seconds / (50 * 49.7))
    assert save.steps_lost() == {"mean": 25, "most": 50}
    head, stop, periodic = save.lines()
    assert head.startswith("save: 218.1 GB on the busiest node at 20 GB/s a node (declared)")
    assert "fits" in stop and "signal lead 300 s" in stop
    assert "25 steps on average, 50 at most" in periodic


def test_an_assumed_bandwidth_says_so_and_refuses_nothing() -> None:
    save = predict_save(request(write=None, grace_s=60))
    assert (save.gbs, save.known) == (ASSUMED_WRITE_GBS, False)
    assert "assumed" in save.source and "doctor --site h100-pyxis --output-bandwidth" in save.source
    assert save.problem == ""
    assert any("GraceTime 60 s" in w and "bandwidth is assumed" in w for w in save.warnings)
    refuse_slow_save(save)  # nothing raised


def test_a_short_lead_is_warned_with_the_lead_that_fits() -> None:
    save = predict_save(request(write=WriteFigure(1.0, "measured", "measured"), lead_s=120))
    assert save.problem == ""
    warning, periodic = save.warnings  # the periodic saves hold training 8.8%: async_save named
    assert "--set async_save=true" in periodic
    assert f"set signal_lead_s: {save.needed_s} in the site profile" in warning
    most = fitting_bytes(120, 49.7, 1.0)
    assert f"at most {most / 1e9:.1f} GB on the busiest node" in warning


def test_a_known_save_beyond_gracetime_is_refused_with_the_bytes_that_fit() -> None:
    save = predict_save(request(write=WriteFigure(5.0, "measured", "measured"), grace_s=90))
    assert "GraceTime 90 s" in save.problem and "at most" in save.problem
    assert any("(submit refuses this)" in w for w in save.warnings)
    with pytest.raises(UserError, match="GraceTime 90 s"):
        refuse_slow_save(save)
    # a GraceTime the step in flight alone passes: no save fits
    tight = predict_save(request(write=WriteFigure(5.0, "measured", "measured"), grace_s=60))
    assert "fewer bytes cannot help" in tight.problem


def test_a_lead_beyond_the_sites_limits_is_refused() -> None:
    save = predict_save(request(write=WriteFigure(0.01, "declared", "declared"), max_time_s=3600,
                                time_limit_s=3600))
    assert "no lead within the site's limits" in save.problem


def test_gracetime_zero_is_a_warning_that_periodic_saves_bound_the_loss() -> None:
    save = predict_save(request(grace_s=0))
    assert save.problem == "" and "GraceTime is 0" in save.warnings[0]


@pytest.mark.parametrize(("grpo", "steps"), [
    ({}, DEFAULT_SAVE_STEPS), ({"save_steps": 200}, 200), ({"save_strategy": "no"}, None),
    ({"save_strategy": "epoch"}, None), ({"save_steps": 0.1, "max_steps": 1000}, 100),
    ({"save_steps": 0.1}, None)])
def test_periodic_save_steps(grpo: dict[str, Any], steps: int | None) -> None:
    assert periodic_save_steps(grpo) == steps


def test_no_periodic_saves_say_what_a_preemption_loses() -> None:
    save = predict_save(request(save_steps=None))
    assert save.saving_fraction is None and save.steps_lost() is None
    assert "periodic saves: none" in save.lines()[-1]


def test_save_time_is_plain_data_for_plan_json() -> None:
    data = predict_save(request()).to_dict()
    assert data["write_gbs_per_node"] == 20.0 and data["lead_needed_s"] >= 49
    assert isinstance(data["lines"], list) and data["save_steps"] == 50
    assert set(f.name for f in dataclasses.fields(SaveTime)) >= {"problem", "warnings"}


def test_periodic_saves_that_hold_training_long_name_async_save_and_it_changes_the_line() -> None:
    """#59: the 72B plan's periodic saves at 5 GB/s a node (218 GB on the busiest node, about
    44 s each, every 10 steps of 49.7 s) hold training over 5% of the time: the warning names
    async_save. With it the line says the write goes on beside the steps, and the stop's lead,
    which a stop's save (always written at once) needs, is unchanged."""
    slow = predict_save(request(write=WriteFigure(5.0, "measured", "measured"), save_steps=10))
    assert slow.saving_fraction is not None and slow.saving_fraction > 0.05
    named = [w for w in slow.warnings if "--set async_save=true" in w]
    assert len(named) == 1 and f"{100 * slow.saving_fraction:.1f}% of the time" in named[0]
    fast = predict_save(request(write=WriteFigure(50.0, "measured", "measured"), save_steps=10))
    assert not [w for w in fast.warnings if "async_save" in w]  # under 5%: not named
    background = predict_save(request(write=WriteFigure(5.0, "measured", "measured"), save_steps=10,
                                      async_save=True, node_memory_gib=2000))
    assert not [w for w in background.warnings if "async_save" in w]
    assert background.needed_s == slow.needed_s and background.to_dict()["async_save"]
    periodic = background.lines()[2]
    assert "written in the background (async_save)" in periodic
    assert f"the {background.seconds:.1f} s write" in periodic and "spent saving" not in periodic


def test_async_save_past_half_the_node_s_memory_is_warned() -> None:
    """The writer holds at most half the memory a job has on a node (CHECKPOINT_HOST_FRACTION,
    the ranks' own share): a node share above it is written at once, holding training."""
    node_gb = busiest_node_bytes(size(), 32, 8) / 2**30  # about 203 GiB
    tight = predict_save(request(async_save=True, node_memory_gib=round(node_gb * 1.5)))
    said = [w for w in tight.warnings if "async_save holds a node's" in w]
    assert len(said) == 1 and f"{node_gb:.1f} GiB" in said[0]
    roomy = predict_save(request(async_save=True, node_memory_gib=round(node_gb * 2.5)))
    assert not [w for w in roomy.warnings if "async_save holds" in w]
    unknown = predict_save(request(async_save=True, node_memory_gib=0))
    assert not [w for w in unknown.warnings if "async_save holds" in w]
