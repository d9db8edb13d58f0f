"""state.json typed and read tolerantly: what the node task decides from (issue #26)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.rundir.state import STATE_FIELDS, RunState
from tests.paths import FIXTURES

OLD_RUN = FIXTURES / "run-dir-d93392d"


def test_every_field_of_a_well_formed_state_reads_typed() -> None:
    data = {"phase": "interrupted", "attempt": "slurm-7.1", "step": 12, "max_steps": 20,
            "notes": ["a", "b"], "started": 1, "last_checkpoint_step": 10,
            "stalled": {"line": "x", "ranks_behind": [1]}, "checkpoint_seconds": 2.5}
    state = RunState.from_dict(data)
    assert (state.phase, state.step, state.notes, state.started) == \
        ("interrupted", 12, ("a", "b"), 1)
    assert state.is_attempt("slurm-7.1") and not state.is_attempt("slurm-7.0")
    assert not RunState().is_attempt("")  # no attempt recorded matches none


def test_a_value_of_the_wrong_type_takes_the_default_and_unknown_keys_are_left_out() -> None:
    state = RunState.from_dict({"phase": 3, "step": "7", "max_steps": True, "notes": "one",
                                "last_checkpoint_step": "x", "from_a_newer_writer": 1})
    assert state == RunState()


def test_the_previous_releases_state_json_reads() -> None:
    data = json.loads((OLD_RUN / "state.json").read_text())
    state = RunState.from_dict(data)
    assert (state.phase, state.step, state.last_checkpoint_step) == ("done", 3, 3)
    assert set(data) <= STATE_FIELDS  # every key it wrote is still a field
    assert {f.name for f in dataclasses.fields(RunState)} == STATE_FIELDS


def test_load_state_before_the_first_write(tmp_path: Path) -> None:
    assert rundir.load_state(tmp_path) == RunState()
    rundir.update_state(tmp_path, phase="training", step=2)
    assert (rundir.load_state(tmp_path).phase, rundir.load_state(tmp_path).step) == ("training", 2)
