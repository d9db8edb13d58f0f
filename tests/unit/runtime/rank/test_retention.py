"""Retention never deletes the newest complete checkpoint before the next one is complete.

transformers 5.x rotates checkpoints inside Trainer._save_checkpoint, right after the new folder's
files are written and before the on_save callbacks run, where the ranks' barrier and rank 0's
completion marker come (runtime/rank/checkpoints/marker.py). It counts folders, not complete checkpoints.
These tests replay one save as the Trainer does it: the files, then its rotation with the limit
the ranks hand GRPOConfig, then the marker and the project's own retention.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers.trainer_utils import rotate_checkpoints

from hpc_grpo.rundir.contract import DEFAULT_SAVE_TOTAL_LIMIT, RunRecord
from hpc_grpo.runtime.rank.checkpoints.folders import newest_complete, retain, retention_limit, write_marker
from hpc_grpo.runtime.rank.setup.grpo_args import grpo_kwargs
from tests.unit.runtime.rank.runtime_checkpoints_helpers import make_checkpoint

KNOWN = ["output_dir", "seed", "use_cpu", "use_vllm", "bf16", "fp16", "ddp_timeout", "logging_steps",
         "report_to", "disable_tqdm", "save_strategy", "save_steps", "save_total_limit", "run_name"]


def record(tmp_path: Path, **grpo: object) -> RunRecord:
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": str(tmp_path), "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                                "grpo_config": grpo})


def save(out: Path, step: int, run: RunRecord, run_dir: Path, *, killed: bool = False) -> None:
    """One save as transformers does it, then (unless killed before it) the project's on_save."""
    folder = make_checkpoint(out, step, marker=False, state_step=step) if not (
        out / f"checkpoint-{step}").exists() else out / f"checkpoint-{step}"
    kwargs, _ = grpo_kwargs(run, run_dir, KNOWN)
    rotate_checkpoints(str(out), save_total_limit=kwargs["save_total_limit"], use_mtime=True)
    if killed:
        return
    write_marker(folder, step, world_size=2)
    retain(out, retention_limit(run.grpo_config))


def steps(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.iterdir())


@pytest.mark.parametrize("limit", [1, 2])
def test_a_save_killed_after_the_rotation_leaves_the_previous_checkpoint(tmp_path: Path,
                                                                         limit: int) -> None:
    out, run = tmp_path / "checkpoints", record(tmp_path, save_total_limit=limit)
    for step in (10, 20, 30):
        save(out, step, run, tmp_path)
    save(out, 40, run, tmp_path, killed=True)  # files written, marker never
    assert newest_complete(out) == out / "checkpoint-30"


def test_a_partial_folder_of_a_killed_save_does_not_count_toward_the_limit(tmp_path: Path) -> None:
    out, run = tmp_path / "checkpoints", record(tmp_path, save_total_limit=2)
    for step in (40, 50):
        save(out, step, run, tmp_path)
    make_checkpoint(out, 57, marker=False)  # a stop's save killed half-way; the run resumed from 50
    save(out, 60, run, tmp_path, killed=True)
    assert newest_complete(out) == out / "checkpoint-50"  # kept until 60 is complete
    save(out, 60, run, tmp_path)  # the next attempt saves 60 again, into the partial folder
    assert steps(out) == [50, 60]  # two complete kept; the partial 57 gone


def test_retain_keeps_the_newest_complete_and_the_protected(tmp_path: Path) -> None:
    out = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        make_checkpoint(out, step, state_step=step)
    make_checkpoint(out, 5, marker=False)
    (out / "not-a-checkpoint").mkdir()
    gone = retain(out, 2, protect=out / "checkpoint-1")  # a best checkpoint: kept besides
    assert sorted(p.name for p in gone) == ["checkpoint-2", "checkpoint-3", "checkpoint-5"]
    assert steps_named(out) == ["checkpoint-1", "checkpoint-4", "not-a-checkpoint"]
    assert retain(out, None) == [] and retain(tmp_path / "missing", 1) == []


def steps_named(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def test_the_limit_reaches_the_ranks_and_trl_does_not_rotate(tmp_path: Path) -> None:
    assert retention_limit(record(tmp_path).grpo_config) == DEFAULT_SAVE_TOTAL_LIMIT
    assert retention_limit(record(tmp_path, save_total_limit=1).grpo_config) == 1
    assert retention_limit(record(tmp_path, save_total_limit=None).grpo_config) is None
    assert grpo_kwargs(record(tmp_path, save_total_limit=1), tmp_path, KNOWN)[0][
        "save_total_limit"] is None
