"""Every reader judges a checkpoint by the ranks' rule (#57: the rule had drifted).

A checkpoint is complete when its marker's step, its folder's step and its trainer_state's
global_step agree (rundir/checkpoints.py). Before, the ranks required all three, export only the
marker's step against the folder's, and status and resume only that a marker existed, so a
folder copied or renamed by hand (marker and name say 30, the trainer's state says 27) was shown
by status, taken by resume as the step to continue from and exported, while every rank skipped
it and resumed from 20. Each reader here is given that run and must agree with the ranks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.errors import UserError
from hpc_grpo.export import layout
from hpc_grpo.rundir.checkpoints import is_complete, newest_complete, run_checkpoints
from hpc_grpo.runs.runfiles import read_run
from hpc_grpo.runtime.rank.checkpoints import folders
from tests.unit.slurmfake import FakeSlurm

MODEL = "Qwen/Qwen2.5-0.5B"  # a catalogue model: nothing to build or download


@pytest.fixture
def run_dir(fake: FakeSlurm, tmp_path: Path) -> Path:
    """A submitted 2-node run that trained to step 33: checkpoint-20 complete, checkpoint-30
    marked complete and named 30 but holding the trainer state of step 27."""
    fake.answer("sinfo", "node1\nnode2\nnode3\nnode4\n")
    request = api.Request(site="sandbox", flags={"model": MODEL, "nodes": 2},
                          sets=("max_steps=40", "save_steps=10"),
                          output_root=str(tmp_path / "runs"), python="/usr/bin/python3")
    run = api.submit(request).run_dir
    (run / "state.json").write_text(json.dumps({
        "phase": "interrupted", "step": 33, "max_steps": 40,
        "last_checkpoint_step": 30, "last_checkpoint": str(run / "checkpoints/checkpoint-30")}))
    for folder_step, trainer_step in ((20, 20), (30, 27)):
        folder = run / "checkpoints" / f"checkpoint-{folder_step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": trainer_step}))
        (folder / "hpc_grpo_complete.json").write_text(json.dumps({"step": folder_step,
                                                                    "time": 1.0}))
    return run


def test_the_ranks_skip_it(run_dir: Path) -> None:
    output = run_dir / "checkpoints"
    assert not is_complete(output / "checkpoint-30")
    assert folders.newest_complete(output) == newest_complete(output) == output / "checkpoint-20"


def test_status_shows_the_checkpoint_the_ranks_would_resume_from(run_dir: Path) -> None:
    """Not state.json's last save (30): the newest checkpoint a new job would load."""
    files = read_run(run_dir)
    assert files.progress.checkpoint_step == 20
    assert files.resume_checkpoint is not None and files.resume_checkpoint.step == 20


def test_resume_continues_from_where_the_ranks_will(fake: FakeSlurm, run_dir: Path) -> None:
    fake.answer("squeue", "")  # the job is gone
    fake.answer("sbatch", "Submitted batch job 4243\n")
    assert api.resume(str(run_dir)).from_step == 20


def test_export_takes_and_offers_only_what_the_ranks_would(run_dir: Path) -> None:
    found = run_checkpoints(run_dir)
    assert [(c.step, c.complete) for c in found] == [(20, True), (30, False)]
    assert layout.pick(found, None, "run").step == 20  # the newest complete
    with pytest.raises(UserError, match="checkpoint-30 of run run is incomplete"):
        layout.pick(found, 30, "run")
