"""The run record survives a write and a read; other schemas and unknown state keys are refused."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import ContractError, RunRecord
from hpc_grpo.rundir.placement import rank_row

BASE = {"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m", "dataset": {"name": "d"},
        "nodes": 2, "procs_per_node": 2,
        "ranks": [rank_row(r, 2, 2).to_dict() for r in range(4)],
        "vllm": {"enabled": True, "mode": "server", "tensor_parallel_size": 2,
                 "server": {"node": 1, "gpus": [0], "trainer_gpus": [1]}},
        "deepspeed": {"zero_stage": 3, "offload_optimizer": True}}


def test_round_trip_keeps_every_block(tmp_path: Path) -> None:
    record = RunRecord.from_dict(BASE)
    (tmp_path / "run.json").write_text(json.dumps(record.to_dict()))
    again = rundir.load_run(tmp_path)
    assert again == record and again.world_size == 4 and again.vllm.server_mode
    assert again.deepspeed is not None and again.deepspeed.offload_optimizer
    assert again.seed == 42 and again.stop.signals == ("USR2", "TERM")


def test_other_schemas_and_broken_records_are_one_line() -> None:
    with pytest.raises(ContractError, match="schema 2; this hpc-grpo reads schema 1: install"):
        RunRecord.from_dict({**BASE, "schema": 2})
    with pytest.raises(ContractError, match="world_size 5 is not nodes 2 x procs_per_node 2"):
        RunRecord.from_dict({**BASE, "world_size": 5})
    with pytest.raises(ContractError, match="not a schema-1 run record"):
        RunRecord.from_dict({k: v for k, v in BASE.items() if k != "model"})


def test_state_writes_are_held_to_the_schema(tmp_path: Path) -> None:
    rundir.update_state(tmp_path, phase="training", step=3)
    with pytest.raises(ValueError, match="not state.json fields"):
        rundir.update_state(tmp_path, stepp=4)
    assert rundir.read_state(tmp_path)["step"] == 3


def test_model_dataset_and_lora_blocks_round_trip(tmp_path: Path) -> None:
    """The #14 blocks (how the model loads, the dataset's details, LoRA) survive run.json; a
    record written before they existed reads with full fine-tuning and no staging."""
    data = {**BASE, "dataset": {"name": "d.jsonl", "solution_column": "solution",
                                "system_prompt": "Think first.", "config": "main"},
            "reward_weights": [1.0, 0.5], "reward_kwargs": {"builtin:length_penalty": {"max_len": 64}},
            "model_load": {"revision": "v1", "commit": "a" * 40, "dtype": "bfloat16",
                           "offline": True, "hf_home": "/shared/hf"},
            "peft": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}
    record = RunRecord.from_dict(data)
    (tmp_path / "run.json").write_text(json.dumps(record.to_dict()))
    again = rundir.load_run(tmp_path)
    assert again == record
    assert again.peft is not None and again.peft.target_modules == ("q_proj", "v_proj")
    assert again.model_load.offline and again.model_load.commit == "a" * 40
    assert again.reward_weights == (1.0, 0.5) and again.dataset.system_prompt == "Think first."
    assert again.reward_kwargs == {"builtin:length_penalty": {"max_len": 64}}
    old = RunRecord.from_dict(BASE)
    assert old.peft is None and not old.model_load.offline and old.reward_weights == ()


# Defaults the launcher and the runtime share, by value: each may be written in contract.py only.
SHARED_DEFAULTS = {"USR2", 20000, 29999}


def _constants_outside_docstrings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and id(node) not in docstrings]


def test_shared_defaults_are_written_in_the_contract_only() -> None:
    """The requeue signal and the port range were restated by the site profile, render and the
    probe (#12); a copy that drifts would make a job and its doctor check disagree."""
    package = Path(contract.__file__).parents[1]
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == Path(contract.__file__):
            continue
        for node in _constants_outside_docstrings(ast.parse(path.read_text())):
            if type(node.value) in (str, int) and node.value in SHARED_DEFAULTS:
                found.append(f"{path.relative_to(package)}:{node.lineno} {node.value!r}")
    assert found == []
    planted = ast.parse('"""USR2"""\nsignal = "USR2"\n')  # the check can fail
    assert [n.value for n in _constants_outside_docstrings(planted)] == ["USR2"]


def test_the_predicted_save_round_trips_and_an_older_record_has_none(tmp_path: Path) -> None:
    """run.json's predicted save (#59), beside predicted_step_s: the seconds, the bandwidth a
    node and its source; a record written before them reads as no prediction."""
    record = RunRecord.from_dict({**BASE, "predicted_save_s": 3.8, "save_write_gbs": 2.0,
                                  "save_write_source": "assumed"})
    (tmp_path / "run.json").write_text(json.dumps(record.to_dict()))
    again = rundir.load_run(tmp_path)
    assert again == record
    assert (again.predicted_save_s, again.save_write_gbs, again.save_write_source) == \
        (3.8, 2.0, "assumed")
    old = RunRecord.from_dict(BASE)
    assert (old.predicted_save_s, old.save_write_gbs, old.save_write_source) == (None, None, "")
    nulls = RunRecord.from_dict({**BASE, "predicted_save_s": None, "save_write_source": None})
    assert (nulls.predicted_save_s, nulls.save_write_source) == (None, "")
