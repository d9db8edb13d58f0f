"""restarts.jsonl's steps lost: counted in steps, whatever the metrics lines' spacing."""

from __future__ import annotations

from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.rank.checkpoints import restart_record


def test_steps_lost_under_logging_every_ten_steps(tmp_path: Path) -> None:
    """A checkpoint at step 50, metrics lines every 10 steps, the attempt killed after its line
    at step 70: 20 steps were trained again (the two lines past 50 dropped, not '2 lost')."""
    for step in range(10, 80, 10):
        rundir.append_jsonl(tmp_path / contract.METRICS_JSONL, {"step": step, "loss": 0.0})
    previous = RunState(attempt="slurm-3.0", phase="training", step=70)
    restart_record.record_resume(tmp_path, previous, "slurm-3.1", [], tmp_path / "checkpoint-50",
                                 50)
    (line,) = rundir.read_jsonl(tmp_path / contract.RESTARTS_JSONL)
    assert (line["stopped_at_step"], line["resumed_from_step"], line["steps_lost"]) == (70, 50, 20)
    assert rundir.load_state(tmp_path).metrics_lines_dropped == 2
    assert [r["step"] for r in rundir.read_jsonl(tmp_path / contract.METRICS_JSONL)] == [
        10, 20, 30, 40, 50]


def test_nothing_lost_when_the_stop_saved_its_step() -> None:
    assert restart_record.steps_lost(6, 6) == 0
    assert restart_record.steps_lost(3, 6) == 0  # a state older than the checkpoint: none


def test_the_attempts_node_count_is_recorded(tmp_path: Path) -> None:
    """min_nodes: each restart says how many nodes its attempt runs on (status shows it)."""
    previous = RunState(attempt="slurm-3.0", phase="training", step=4)
    restart_record.record_resume(tmp_path, previous, "slurm-3.1", [], None, 4, nodes=2)
    (line,) = rundir.read_jsonl(tmp_path / contract.RESTARTS_JSONL)
    assert line["nodes"] == 2
