"""rank/setup/process_group.py skip_inference_op: DeepSpeed's CPU shared-memory op is not built."""

from __future__ import annotations

import pytest

from hpc_grpo.runtime.rank.setup import process_group


def test_the_op_is_marked_incompatible_and_deepspeed_then_builds_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import deepspeed.ops

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # the package shadows the name

    table = dict(deepspeed.ops.__compatible_ops__)
    monkeypatch.setattr(deepspeed.ops, "__compatible_ops__", table)  # restored after the test
    assert process_group.SHM_OP in table  # the name this DeepSpeed gives the op
    assert process_group.skip_inference_op()
    assert table[process_group.SHM_OP] is False
    assert ds_torch.build_shm_op() is None  # not built (a build would return the module)


def test_an_unknown_table_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import deepspeed.ops

    monkeypatch.setattr(deepspeed.ops, "__compatible_ops__", {"cpu_adam": True})
    assert not process_group.skip_inference_op()
    assert deepspeed.ops.__compatible_ops__ == {"cpu_adam": True}
