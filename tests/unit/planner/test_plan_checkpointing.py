"""Gradient checkpointing as the plan's choice: off where the recipe leaves it unset, the memory
plan fits without it and the model predicts it faster (1.5B on 2 x H200: measured 1.253 s/step
without against 1.449 with, docs/results/2026-11-26-bench-two-1.5b-layouts-h200x2-call1.json);
a recipe's value is kept; the ranks' GRPOConfig gets the choice through run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.config.spec import build_spec
from hpc_grpo.preflight import inputs

SETS = ("per_device_train_batch_size=32", "num_generations=8", "max_completion_length=256")


def _site(tmp_path: Path, gib: int, kind: str) -> str:
    path = tmp_path / f"two-{kind}.yaml"
    path.write_text(f"scheduler: local\ngpus_per_node: 2\ngpu_memory_gib: {gib}\n"
                    f"gpu_type: {kind}\ncpus_per_node: 16\ncpu_memory_gib: 250\n"
                    f"max_time: '24:00:00'\noutput_root: {tmp_path / 'runs'}\n")
    return str(path)


@pytest.fixture(autouse=True)
def cluster_sized_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))


def _prepare(tmp_path: Path, gib: int, kind: str, *sets: str) -> api.Prepared:
    return api.prepare(api.Request(site=_site(tmp_path, gib, kind), sets=(*SETS, *sets),
                                   flags={"model": "builtin:qwen2-1.5b",
                                          "dataset": "builtin:digits"}))


def test_unset_on_two_h200_the_plan_turns_recomputation_off(tmp_path: Path) -> None:
    prepared = _prepare(tmp_path, 140, "H200")
    plan = prepared.plan
    assert plan.memory is not None and plan.memory.gradient_checkpointing is False
    assert plan.memory.zero_stage == 2
    record = plan.run_record(prepared.run_id, str(prepared.run_dir)).to_dict()
    assert record["grpo_config"]["gradient_checkpointing"] is False  # the ranks' GRPOConfig
    assert record["memory_plan"]["gradient_checkpointing"] is False
    change = next(line for line in plan.changes if line.startswith("gradient_checkpointing"))
    assert "predicted 1.39 s/step against 1.48" in change and "1.253" in change
    assert plan.memory.reason("gradient_checkpointing").startswith("False: the plan's choice")
    assert plan.memory.speed is not None
    rows = {row.layout: row.verdict for row in plan.memory.speed.considered}
    assert rows["TP 1, ZeRO-2, no sleep, no grad ckpt"] == "chosen"
    assert rows["TP 1, ZeRO-2, no sleep, grad ckpt"].startswith("slower")


def test_spec_json_keeps_the_request_so_a_resume_plans_the_choice_again(tmp_path: Path) -> None:
    """spec.json is what resume plans from: the plan's choice must not come back as the user's
    ("False: set by you"), and the run record still carries it to the ranks."""
    prepared = _prepare(tmp_path, 140, "H200")
    saved = json.loads(prepared.spec_text())["spec"]
    assert "gradient_checkpointing" not in saved["grpo"]
    assert prepared.plan.spec.grpo["gradient_checkpointing"] is False
    again = api.build_plan(prepared.plan.site, build_spec(saved, {}, {}, prepared.plan.site),
                           prepared.plan.model)
    assert again.memory is not None
    assert again.memory.reason("gradient_checkpointing").startswith("False: the plan's choice")


@pytest.mark.parametrize("value", ["true", "false"])
def test_a_recipes_value_is_kept(tmp_path: Path, value: str) -> None:
    plan = _prepare(tmp_path, 140, "H200", f"gradient_checkpointing={value}").plan
    assert plan.memory is not None and plan.memory.gradient_checkpointing is (value == "true")
    assert not any(line.startswith("gradient_checkpointing:") and "plan:" in line
                   for line in plan.changes)
    assert plan.memory.reason("gradient_checkpointing").startswith(
        f"{value.capitalize()}: set by you")
    assert plan.memory.speed is not None
    assert all(row.layout.endswith("grad ckpt") for row in plan.memory.speed.considered)
    assert not any(row.layout.endswith(", no grad ckpt") == (value == "true")
                   for row in plan.memory.speed.considered)


def test_where_it_would_not_fit_recomputation_stays(tmp_path: Path) -> None:
    """2 x 80 GB: without recomputation ZeRO-2 would plan 83 GiB (measured 72.6 GiB on an H200
    with vLLM's 14 GiB share; not measured on an 80 GB card), so TRL's default stays."""
    plan = _prepare(tmp_path, 79, "H100").plan
    assert plan.memory is not None and plan.memory.gradient_checkpointing is True
    assert "does not fit" in plan.memory.reason("gradient_checkpointing")
    assert not any(line.startswith("gradient_checkpointing") for line in plan.changes)
