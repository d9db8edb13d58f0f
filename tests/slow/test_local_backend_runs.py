"""The local back end runs what render shows, and reads run directories of the previous release.

Issue #26: a `scheduler: local` profile's `env` never reached the ranks (submit ran the node task
through submitit's LocalExecutor, not the script render printed). Here a profile under another
name than `local` sets an environment variable; a reward records what each rank saw.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.clusterlib import submitted
from tests.paths import REPO

CLI = str(Path(sys.executable).with_name("hpc-grpo"))
OLD_RUN = REPO / "tests" / "fixtures" / "run-dir-d93392d"


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env=env)


@pytest.mark.slow
def test_a_local_profiles_env_reaches_the_ranks_and_render_is_what_ran(tmp_path: Path) -> None:
    site = tmp_path / "workstation.yaml"  # a local site not named "local"
    site.write_text("scheduler: local\ncpus_per_node: 2\nprocs_per_node: 2\n"
                    "port_range: [29600, 29999]\nenv:\n  HPC_GRPO_TEST_MARK: from-profile\n"
                    "  OMP_NUM_THREADS: '1'\n")
    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    job = ["--site", str(site), "--model", "builtin:tiny", "--reward",
           "tests.slow.env_reward:length_recording_env", "--set", "max_steps=2",
           "--output-root", str(tmp_path / "runs"), "--run-id", "env-0001"]
    rendered = _cli("render", *job, cwd=REPO, env=env)
    assert rendered.returncode == 0, rendered.stderr
    proc = _cli("submit", *job, cwd=REPO, env=env)  # follows: the profile's scheduler is local
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED" in proc.stderr
    run_dir = submitted(proc.stdout)[2]
    assert (run_dir / "job.sbatch").read_text() == rendered.stdout  # what render showed ran
    for rank in (0, 1):
        seen = json.loads((run_dir / f"env-rank-{rank}.json").read_text())
        assert seen == {"HPC_GRPO_TEST_MARK": "from-profile", "OMP_NUM_THREADS": "1",
                        "RANK": str(rank)}
    node_log = (run_dir / "logs" / "node-local.log").read_text()
    assert "hpc_grpo.runtime.rank.train" in node_log  # the node task's torchrun line
    logs = json.loads(_cli("logs", str(run_dir), "--json", cwd=REPO, env=env).stdout)
    assert str(run_dir / "logs" / "node-local.log") in [entry["path"] for entry in logs]


def _moved_old_run(tmp_path: Path) -> Path:
    """The fixture at a path of this test's, as if its root had been here all along."""
    run_dir = tmp_path / "runs" / "old-release-run"
    shutil.copytree(OLD_RUN, run_dir)
    (run_dir / "FIXTURE.md").unlink()
    model = tmp_path / "home" / "models" / "tiny"  # where HPC_GRPO_HOME keeps builtin:tiny
    for name in ("run.json", "state.json", "job.sbatch", "grpo_config.json", "spec.json"):
        path = run_dir / name
        text = path.read_text().replace("/tmp/oldroot/old-release-run", str(run_dir))
        text = text.replace("/tmp/oldhome/models/tiny", str(model))
        text = text.replace("/work/main/.venv/bin/python", sys.executable)
        path.write_text(text)
    return run_dir


@pytest.mark.slow
def test_status_logs_cancel_and_resume_of_a_run_directory_of_the_previous_release(
        tmp_path: Path) -> None:
    run_dir = _moved_old_run(tmp_path)
    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home")}
    made = _cli("example-model", str(tmp_path / "home" / "models" / "tiny"), cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    status = _cli("status", str(run_dir), "--json", cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)[0]
    assert (row["state"], row["phase"], row["step"], row["source"]) == \
        ("COMPLETED", "done", 3, "local"), row
    # no saves.jsonl, no predicted_save_s (#59): state.json's last save, no prediction
    assert (row["save_s"], row["save_s_predicted"]) == ([0.031], None), row
    logs = json.loads(_cli("logs", str(run_dir), "--json", cwd=tmp_path, env=env).stdout)
    paths = [Path(entry["path"]).name for entry in logs]
    assert paths[:2] == ["rank-0.log", "rank-1.log"] and "10604_0_log.out" in paths
    cancel = _cli("cancel", str(run_dir), cwd=tmp_path, env=env)
    assert cancel.returncode == 0 and "not running: nothing cancelled" in cancel.stdout
    resume = _cli("resume", str(run_dir), "--set", "max_steps=5", "--wait", cwd=tmp_path, env=env)
    assert resume.returncode == 0, resume.stdout + resume.stderr
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["phase"], state["step"]) == ("done", 5), state
    assert state["resumed_from"].endswith("checkpoint-3"), state  # the old release's checkpoint
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]
    jobs = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert jobs[-1]["resumed_from_step"] == 3 and jobs[-1]["resumed_from_job"] == "10604"


@pytest.mark.slow
def test_a_cancel_before_the_first_step_trains_no_step(tmp_path: Path) -> None:
    """Issue #58: a cancel before step 1 printed success, the run showed RUNNING, trained a
    step and saved checkpoint-1 (the stop request was read only at a step end). Now the ranks
    agree on it before training: no step, no checkpoint, and status says CANCELLED."""
    import time

    env = {**os.environ, "HPC_GRPO_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    job = ["--site", "local", "--model", "builtin:tiny", "--set", "max_steps=5",
           "--output-root", str(tmp_path / "runs"), "--run-id", "cancel-0001"]
    proc = _cli("submit", *job, "--no-wait", cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = submitted(proc.stdout)[2]
    deadline = time.monotonic() + 120
    while not (run_dir / "state.json").exists():  # rank 0 started: the node task handles TERM
        assert time.monotonic() < deadline, "rank 0 never started"
        time.sleep(0.1)
    cancel = _cli("cancel", str(run_dir), cwd=REPO, env=env)
    assert cancel.returncode == 0 and "before their first step" in cancel.stdout, cancel.stdout
    while True:
        row = json.loads(_cli("status", str(run_dir), "--json", cwd=REPO, env=env).stdout)[0]
        if row["finished"]:
            break
        assert time.monotonic() < deadline + 120, row
        time.sleep(1)
    state = json.loads((run_dir / "state.json").read_text())
    assert (row["state"], state["phase"], state["step"]) == ("CANCELLED", "interrupted", 0), state
    assert not list((run_dir / "checkpoints").glob("checkpoint-*")) if (
        run_dir / "checkpoints").exists() else True
    assert not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text()
