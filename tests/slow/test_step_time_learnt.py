"""The step-time figure learnt from the site's own runs, through the CLI (issue #58): a tiny CPU
run on `--site local`, then `status RUN` shows its measured steady s/step and `plan` of the same
job says it goes by that figure, measured on this site by that run. A job of another shape
(another completion length) is not given it. The run saves at steps 2 and 4, and `status RUN`
sets each save beside the plan's predicted save (#59: saves.jsonl against run.json)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpc_grpo import rundir
from hpc_grpo.planner.save_time import ASSUMED_WRITE_GBS
from hpc_grpo.rundir import ledgers
from tests.cluster.clusterlib import submitted
from tests.slow.runtime_slow_helpers import cli


@pytest.mark.slow
def test_a_plan_after_a_run_of_its_shape_goes_by_the_measured_step(tmp_path: Path) -> None:
    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home")}
    job = ["--site", "local", "--model", "builtin:tiny", "--set", "max_steps=4",
           "--set", "max_completion_length=16", "--set", "save_steps=2",
           "--output-root", str(tmp_path / "runs")]
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

    # each save against the plan's (#59): one ledger line per checkpoint, the prediction beside
    saved = ledgers.saves(run_dir)
    folders = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert [s.step for s in saved] == folders == [2, 4] and all(s.attempt for s in saved)
    predicted = rundir.load_run(run_dir).predicted_save_s
    assert predicted is not None and predicted > 0  # the model was built, so its size is known
    assert row["save_s"] == [s.seconds for s in saved] and row["save_s_predicted"] == predicted
    assert row["save_write_source"] == "assumed"  # no doctor measurement in this HPC_GRPO_HOME
    against = (f" s predicted ({row['save_s_median'] / predicted - 1:+.0%}), "
               f"at {ASSUMED_WRITE_GBS:g} GB/s a node (assumed)")
    assert f"{run_id}: saves: 2 saves, " in shown and against in shown
