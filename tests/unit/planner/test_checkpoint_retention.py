"""How many checkpoints the plan keeps (#29): sized against the output file system's free space
where the recipe leaves save_total_limit unset, the recipe's own value honoured, the value in
run.json's grpo_config and `plan --json`, and resume counting the run's own checkpoints as room."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.errors import UserError
from hpc_grpo.planner import dense_arch
from hpc_grpo.planner.checkpoint_size import (
    CheckpointRequest,
    margin,
    size_checkpoint,
    size_limit,
)
from hpc_grpo.planner.report import plan_report
from hpc_grpo.preflight import inputs
from hpc_grpo.rundir.contract import DEFAULT_SAVE_TOTAL_LIMIT
from tests.unit.planner.checkpoint_size_helpers import _request, tiny_home  # noqa: F401 - fixture

GIB = 2**30
QWEN_7B = dense_arch("qwen2.5-7b", hidden_size=3584, num_layers=28, num_attention_heads=28,
                     num_kv_heads=4, intermediate_size=18944, vocab_size=152064,
                     tie_word_embeddings=False, max_position_embeddings=32768, qkv_bias=True)


def seven_b() -> int:
    """One checkpoint of Qwen2.5-7B, full parameters, ZeRO-3 with optimizer offload, 2 x H100."""
    n = QWEN_7B.num_params
    return size_checkpoint(CheckpointRequest(n, n, 3, True, False, "cuda", 2, None)).one


def test_a_7b_checkpoint_keeps_none_on_128_gib_and_one_on_200() -> None:
    one = seven_b()
    assert 84 * GIB < one < 87 * GIB  # docs/benchmarks.md: 85-93 GB on disk
    keep, line = size_limit(one, 128 * GIB, DEFAULT_SAVE_TOTAL_LIMIT, "the disk")
    assert keep == 0 and "1 checkpoint(s) of 85" in line and "need 170" in line
    keep, line = size_limit(one, 200 * GIB, DEFAULT_SAVE_TOTAL_LIMIT, "the disk")
    assert keep == 1 and line.startswith("save_total_limit: unset -> 1 (the most that fit")
    assert "2 at once while saving = 170" in line and "10.0 GiB margin" in line


def test_limit_is_the_most_that_fit_beside_the_next_capped_at_the_default() -> None:
    one = 10 * GIB
    for free, keep in ((25 * GIB, 1), (33 * GIB, 2), (40 * GIB, 2), (43 * GIB, 3),
                       (10**15, DEFAULT_SAVE_TOTAL_LIMIT)):
        got, _ = size_limit(one, free, DEFAULT_SAVE_TOTAL_LIMIT, "fs")
        assert got == keep, (free, got)
        assert got == 0 or (got + 1) * one <= free - margin(free)  # kept + the one being written
    assert size_limit(one, 10**15, DEFAULT_SAVE_TOTAL_LIMIT, "fs")[1].endswith(
        f"{DEFAULT_SAVE_TOTAL_LIMIT + 1} at once while saving = 40.0 GiB)")
    assert margin(10 * GIB) == GIB and margin(1000 * GIB) == 50 * GIB


def _free(monkeypatch: pytest.MonkeyPatch, free: int | None) -> None:
    monkeypatch.setattr(inputs, "free_space", lambda root: (free, "the output file system (x)"))


def test_the_sized_limit_reaches_run_json_and_plan_json(tiny_home: Path, tmp_path: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _free(monkeypatch, 10**13)
    plan = api.prepare(_request(tmp_path / "runs")).plan
    assert plan.save_total_limit == DEFAULT_SAVE_TOTAL_LIMIT
    assert plan.run_record("r", "/x").grpo_config["save_total_limit"] == DEFAULT_SAVE_TOTAL_LIMIT
    assert any(c.startswith("save_total_limit: unset -> 3 (the default") for c in plan.changes)
    report = json.loads(json.dumps(plan_report(plan)))
    assert report["checkpoint"]["save_total_limit"] == 3 and report["checkpoint"]["at_once"] == 4
    one = plan.checkpoint.one if plan.checkpoint else 0
    _free(monkeypatch, int(2.5 * one) + GIB)  # two at once fit, not three: keeps one
    plan = api.prepare(_request(tmp_path / "runs")).plan
    assert plan.run_record("r", "/x").grpo_config["save_total_limit"] == 1
    assert plan.checkpoint and plan.checkpoint.at_once == 2 and not plan.checkpoint_problem
    _free(monkeypatch, None)  # unknown: the default, said so
    plan = api.prepare(_request(tmp_path / "runs")).plan
    assert plan.save_total_limit == 3 and any("free space is unknown" in c for c in plan.changes)


def test_not_two_at_once_is_refused_unless_the_recipe_sets_the_limit(
        tiny_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _free(monkeypatch, 10**13)
    one = api.prepare(_request(tmp_path / "runs")).plan.checkpoint.one  # type: ignore[union-attr]
    _free(monkeypatch, int(1.5 * one) + GIB)  # one fits, two do not
    with pytest.raises(UserError, match="newest complete checkpoint and the next") as caught:
        api.submit(_request(tmp_path / "runs"))
    assert "save_total_limit: 1" in (caught.value.hint or "")
    _free(monkeypatch, int(1.5 * one))  # the recipe's own limit is checked without the margin
    plan = api.prepare(_request(tmp_path / "runs", save_total_limit=1)).plan
    assert not plan.checkpoint_problem and plan.save_total_limit is None
    assert plan.run_record("r", "/x").grpo_config["save_total_limit"] == 1
    assert any("later saves will be skipped" in w for w in plan.warnings)


def test_resume_counts_the_runs_own_checkpoints_as_room(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "checkpoints" / "checkpoint-5"
    folder.mkdir(parents=True)
    (folder / "optimizer.pt").write_bytes(b"x" * 5000)
    assert inputs.with_run_checkpoints((100, "fs"), tmp_path / "run") == (5100, "fs")
    assert inputs.with_run_checkpoints((None, ""), tmp_path / "run") == (None, "")
    assert inputs.with_run_checkpoints((100, "fs"), tmp_path / "new") == (100, "fs")


def test_save_strategy_no_is_not_refused_when_no_checkpoint_fits(
        tiny_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A run that asks for no checkpoints (bench_gpu.py's 7B runs on a 64 GiB disk, where the
    refusal was found) is planned with a warning: only a stop would save, and that save is
    skipped on the ranks; the same free space still refuses a run that schedules saves."""
    _free(monkeypatch, 10**13)
    one = api.prepare(_request(tmp_path / "runs")).plan.checkpoint.one  # type: ignore[union-attr]
    _free(monkeypatch, one // 2)  # not even one fits
    with pytest.raises(UserError, match="no save can complete"):
        api.submit(_request(tmp_path / "runs", save_total_limit=1))
    plan = api.prepare(_request(tmp_path / "runs", save_strategy="no", save_total_limit=1)).plan
    assert not plan.checkpoint_problem
    assert any("only a stop saves" in w and "no save can complete" in w for w in plan.warnings)
    _free(monkeypatch, int(1.5 * one) + GIB)  # one fits, two do not: a first stop's save completes
    plan = api.prepare(_request(tmp_path / "runs", save_strategy="no")).plan
    assert not plan.checkpoint_problem
    said = [w for w in plan.warnings if "save_strategy is \"no\"" in w]
    assert said and "beside the previous stop's checkpoint" in said[0]
    assert "restarts from step 0" not in said[0]
