"""The README's first command: the local site trains the tiny model and the reward moves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted
from tests.paths import REPO


@pytest.mark.slow
def test_readme_main_job(tmp_path: Path) -> None:
    cli = str(Path(sys.executable).with_name("hpc-grpo"))
    recipe = str(REPO / "recipes" / "tiny-cpu.yaml")
    proc = subprocess.run([cli, "submit", "--site", "local", "--recipe", recipe,
                           "--output-root", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = submitted(proc.stdout)[2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 100
    assert summary["reward_delta"] > 10, summary  # measured here: about +27 over 100 steps
    assert (run_dir / "reward_curve.png").stat().st_size > 10_000
    assert "COMPLETED" in proc.stderr and "change +" in proc.stderr


@pytest.mark.slow
def test_submit_that_waits_exits_1_when_the_job_fails(tmp_path: Path) -> None:
    """docs/cli.md's exit code 1: a value only TRL's __post_init__ refuses passes the login node,
    fails every rank before the first step (a configuration error, not retried), the job ends
    FAILED, and `submit` (waiting, as on the local site by default) exits 1."""
    cli = str(Path(sys.executable).with_name("hpc-grpo"))
    proc = subprocess.run([cli, "submit", "--site", "local", "--model", "builtin:tiny",
                           "--set", "max_steps=2", "--set", "auto_find_batch_size=true",
                           "--output-root", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_dir = submitted(proc.stdout)[2]
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["phase"], state["stop_cause"]) == ("failed", "configuration error"), state
    assert "FAILED" in proc.stderr
