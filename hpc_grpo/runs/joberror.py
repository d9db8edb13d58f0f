"""What the job script itself recorded before any node task started: a site module that did not
load (``job-error.json``, written by the rendered script, see sbatch_templates/slurm.sbatch.j2).

The ranks never ran, so state.json cannot say it; status shows this line instead, for the job
that wrote it only (a later job of the same run, e.g. after ``resume`` with the module fixed,
is not blamed for it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

from hpc_grpo.rundir.contract import JOB_ERROR_JSON

CAUSE = "job script"
T = TypeVar("T")


def line(run_dir: Path, job_id: str) -> str:
    """"module load X failed on HOST" when job ``job_id`` recorded it, else ""."""
    try:
        data: Any = json.loads((run_dir / JOB_ERROR_JSON).read_text(errors="replace"))
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or not job_id or str(data.get("job_id")) != job_id:
        return ""
    return f"module load {data.get('module')} failed on {data.get('host') or '?'}"


def apply(row: T, run_dir: Path, job_id: str) -> T:
    """The status row with the job script's failure as its phase, cause and message."""
    text = line(run_dir, job_id)
    if not text:
        return row
    return dataclasses.replace(row, phase="failed", cause=CAUSE, message=text)  # type: ignore[type-var]
