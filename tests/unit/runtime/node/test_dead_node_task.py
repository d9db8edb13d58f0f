"""The rank-0 node task after a crash with a node whose slurmd is gone (#60): a new job without
it instead of a requeue Slurm would hold until SlurmdTimeout; the requeue where that fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import RETRIES_JSONL
from hpc_grpo.rundir.view import append_job_line
from hpc_grpo.runtime.node import replace, slurm_facts
from hpc_grpo.runtime.node import task as node
from tests.unit.runtime.node.config_error_node_helpers import _node_task


@pytest.fixture
def dead_node2(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Job 7 ran on node1 and node2, and node2's slurmd takes no connection; the calls to
    replace.replace are recorded (the answer: job 9)."""
    asked: list[tuple[str, list[str]]] = []
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setattr(slurm_facts, "node_records", lambda _env: {
        "node1": {"NodeName": "node1", "State": "MIXED"},
        "node2": {"NodeName": "node2", "State": "MIXED"}})
    monkeypatch.setattr(slurm_facts, "silent_nodes", lambda records, _port: ["node2"])

    def replaced(_run_dir: Path, job: str, dead: list[str], _env: Any) -> replace.Replacement:
        asked.append((job, list(dead)))
        return replace.Replacement("9")

    monkeypatch.setattr(replace, "replace", replaced)
    return asked


def test_a_dead_node_brings_a_new_job_not_a_requeue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dead_node2: list[tuple[str, list[str]]]) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    assert node.NodeTask(str(run_dir))() == 1
    assert dead_node2 == [("7", ["node2"])]
    assert [argv for argv in called if "requeue" in argv] == []  # Slurm would hold it 300 s
    assert rundir.read_state(run_dir)["stop_cause"] == "node failure"
    assert rundir.read_jsonl(run_dir / RETRIES_JSONL)[-1]["job_id"] == "7"


def test_without_a_new_job_the_old_one_is_requeued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dead_node2: list[tuple[str, list[str]]]) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    monkeypatch.setattr(replace, "replace", lambda *_: replace.Replacement(problem="no sbatch"))
    assert node.NodeTask(str(run_dir))() == 1
    assert [argv for argv in called if "requeue" in argv] == [["scontrol", "requeue", "7"]]


def test_jobs_resubmitted_from_one_another_share_their_retries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dead_node2: list[tuple[str, list[str]]]) -> None:
    """Job 7 was submitted by job 6's node task without a dead node: job 6's retries are its
    own (unlike a user's `hpc-grpo resume`, which starts a fresh count)."""
    run_dir, _ = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    append_job_line(run_dir, "6", "submitted")
    append_job_line(run_dir, "7", "submitted", resubmitted_from_job="6")
    for step in range(5):  # run.json's max_requeues (5) spent by job 6
        rundir.append_jsonl(run_dir / RETRIES_JSONL, {"checkpoint_step": step, "job_id": "6"})
    with pytest.raises(node.RunFailed, match="5 automatic retries spent"):
        node.NodeTask(str(run_dir))()
    assert dead_node2 == []


def test_a_run_the_user_cancelled_meanwhile_is_not_requeued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dead_node2: list[tuple[str, list[str]]]) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    monkeypatch.setattr(replace, "replace", lambda *_: replace.Replacement(
        problem="job 7 was cancelled by the user", cancelled=True))
    assert node.NodeTask(str(run_dir))() == 1
    assert [argv for argv in called if "requeue" in argv] == []
