"""A node task's surroundings for unit tests: a minimal run directory, a torchrun stand-in and
the Slurm environment of one node. Shared so that every node-task test fakes the same seams
(``subprocess.Popen`` for torchrun, ``subprocess.run`` for scontrol) the same way."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import RUN_JSON, RunRecord
from hpc_grpo.runtime.node import task as node


def minimal_run(tmp_path: Path) -> Path:
    """A run directory holding only a one-node, one-rank run.json."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": str(run_dir),
                                  "model": "m", "dataset": {"name": "d"}, "nodes": 1,
                                  "procs_per_node": 1})
    (run_dir / RUN_JSON).write_text(json.dumps(record.to_dict()))
    return run_dir


def fake_node(monkeypatch: pytest.MonkeyPatch, job_id: str,
              torchrun_wait: Callable[[], int]) -> list[list[str]]:
    """Node 0 of Slurm job ``job_id``, first attempt: torchrun is a stand-in whose ``wait``
    calls ``torchrun_wait``; every other command is recorded (returned list) and succeeds."""

    class Torchrun:
        def __init__(self, *_: Any, **__: Any) -> None:
            pass

        def wait(self) -> int:
            return torchrun_wait()

    called: list[list[str]] = []
    monkeypatch.setattr(node.subprocess, "Popen", Torchrun)
    monkeypatch.setattr(node.subprocess, "run", lambda argv, **_: called.append(argv)
                        or subprocess.CompletedProcess(argv, 0))
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURM_NODEID", "0")
    return called
