"""Fake Slurm binaries for unit tests, and run directories as submit and the ranks leave them.

FakeSlurm puts sh wrappers around tests/fakebin/fake_slurm.py first on PATH: canned answers in
(one per binary), recorded calls out. The line helpers write what sacct and squeue print for the
fields hpc_grpo.scheduler.slurm asks for; ``make_run`` writes a run directory and indexes it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import DatasetBlock, RunRecord
from hpc_grpo.rundir.view import append_job_line
from hpc_grpo.runs import registry
from tests.paths import TESTS

FAKE = TESTS / "fakebin" / "fake_slurm.py"
FAKED = ("sacct", "squeue", "sbatch", "scancel", "scontrol", "srun", "sinfo")


class FakeSlurm:
    """Fake Slurm binaries first on PATH; canned answers in, recorded calls out."""

    def __init__(self, root: Path, names: tuple[str, ...] = FAKED) -> None:
        self.dir = root / "fake-state"
        self.bin = root / "fake-bin"
        self.dir.mkdir()
        self.bin.mkdir()
        for name in names:
            wrapper = self.bin / name
            wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" {name} "$@"\n')
            wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    def answer(self, name: str, out: str = "", err: str = "", rc: int = 0,
               sleep: float = 0) -> None:
        (self.dir / f"{name}.sleep").write_text(str(sleep))
        (self.dir / f"{name}.out").write_text(out)
        (self.dir / f"{name}.err").write_text(err)
        (self.dir / f"{name}.rc").write_text(str(rc))

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        path = self.dir / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [c for c in map(json.loads, lines) if name is None or c["name"] == name]


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            names: tuple[str, ...] = FAKED) -> FakeSlurm:
    fake = FakeSlurm(tmp_path, names)
    monkeypatch.setenv("FAKE_SLURM_DIR", str(fake.dir))
    monkeypatch.setenv("PATH", f"{fake.bin}{os.pathsep}{os.environ['PATH']}")
    return fake


def sacct_line(job_id: str, state: str, submit: str, *, name: str = "grpo-tiny",
               cluster: str = "sandbox", submit_line: str = "", nodes: str = "node[1-2]",
               code: str = "0:0") -> str:
    """One line of `sacct -o SACCT_FIELDS` (JobID ... Submit,JobName,Cluster,SubmitLine)."""
    return "|".join([job_id, state, nodes, "00:01:00", code, "None", submit, name, cluster,
                     submit_line]) + "\n"


def squeue_line(job_id: str, state: str, submit: str, *, name: str = "grpo-tiny",
                cluster: str = "sandbox", command: str = "", nodes: str = "node[1-2]",
                reason: str = "None") -> str:
    """One line of `squeue --Format=SQUEUE_FORMAT` (JobID ... SubmitTime,Cluster,Name,Command)."""
    return "|".join([job_id, state, nodes, "0:10", reason, submit, cluster, name,
                     command or "(null)"]) + "\n"


def make_run(root: Path, run_id: str, *, job: dict[str, Any] | None = None, phase: str = "",
             step: int = 0, site: str = "sandbox", register: bool = True) -> Path:
    """A run directory as submit leaves it, plus state.json and metrics as the ranks write them.

    `job` is the "submitted" line of jobs.jsonl beside event and time (job_id and identity)."""
    run_dir = root / run_id
    (run_dir / "submitit").mkdir(parents=True)
    record = RunRecord(run_id=run_id, run_dir=str(run_dir), model="tiny",
                       dataset=DatasetBlock(name="builtin:digits"), nodes=1, procs_per_node=1,
                       ranks=(), site=site, scheduler="local" if site == "local" else "slurm",
                       grpo_config={"max_steps": 10})
    (run_dir / "run.json").write_text(json.dumps(record.to_dict()))
    if job is not None:
        append_job_line(run_dir, str(job["job_id"]), "submitted",
                            **{k: v for k, v in job.items() if k != "job_id"})
    if phase:
        (run_dir / "state.json").write_text(json.dumps(
            {"phase": phase, "step": step, "max_steps": 10, "last_checkpoint_step": step}))
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "reward_mean": -s / 10, "tokens_per_s": 800.0}) + "\n"
            for s in range(1, step + 1)))
    if register:
        registry.register(run_id, run_dir)
    return run_dir


def identity(run_dir: Path, job_id: str, *, cluster: str = "sandbox",
             submit: str = "2026-01-01T10:00:00", name: str = "grpo-tiny") -> dict[str, str]:
    """The "submitted" line fields submit records for a job of `run_dir`."""
    return {"job_id": job_id, "cluster": cluster, "submit_time": submit, "job_name": name,
            "script": f"{run_dir}/submitit/.submission_file_{job_id}abc.sh"}
