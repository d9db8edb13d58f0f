"""The step-time figure learnt from the site's own runs, through the CLI (issue #58): a tiny CPU
run on `--site local`, then `status RUN` shows its measured steady s/step and `plan` of the same
job says it goes by that figure, measured on this site by that run. A job of another shape
(another completion length) is not given it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted
from tests.slow.runtime_slow_helpers import cli


@pytest.mark.slow
def test_a_plan_after_a_run_of_its_shape_goes_by_the_measured_step(tmp_path: Path) -> None:
    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home")}
    job = ["--site", "local", "--model", "builtin:tiny", "--set", "max_steps=4",
           "--set", "max_completion_length=16", "--output-root", str(tmp_path / "runs")]
    before = json.loads(cli("plan", *job, "--json", env=env).stdout)
    assert before["step_time"] is None  # a CPU site predicts nothing and nothing is measured
    proc = cli("submit", *job, "--run-id", "learn-0001", env=env)  # follows: the local site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id, _, run_dir = submitted(proc.stdout)
    assert "step time: " in proc.stderr and " s measured (median of 3 steps, 2-4)" in proc.stderr

    row = json.loads(cli("status", run_id, "--json", env=env).stdout)[0]
    assert row["step_s"] > 0 and row["step_s_predicted"] is None
    shown = cli("status", run_id, env=env).stdout
    assert f"{run_id}: step time: {row['step_s']:.2f} s measured (median of 3 steps, 2-4)" in shown

    after = cli("plan", *job, env=env)
    assert after.returncode == 0, after.stderr
    assert (f"step time: {row['step_s']:.2f} s measured on this site by run learn-0001 (median "
            "of 3 steps, 2-4; no prediction on this site)") in after.stdout
    learnt = json.loads(cli("plan", *job, "--json", env=env).stdout)["step_time"]
    assert (learnt["source"], learnt["measured_by"]) == ("measured", "learn-0001")
    assert learnt["s_per_step"] == round(row["step_s"], 3)
    other = cli("plan", *job, "--set", "max_completion_length=24", "--json", env=env)
    assert json.loads(other.stdout)["step_time"] is None  # another shape learns nothing
    assert json.loads((run_dir / "summary.json").read_text())["steady_step_time_s"] == \
        pytest.approx(row["step_s"])
