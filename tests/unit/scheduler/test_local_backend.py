"""The local back end runs the run directory's job.sbatch as it is, and acts only on its own job.

The scripts here stand in for the rendered one: they export what a profile's env would and exec
a Python whose argv carries the node task's module name and the run directory, as local.sh.j2's
last line does, so the pid checks see what they see on a real run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import JOB_SBATCH, JOBS_JSONL, RUN_JSON
from hpc_grpo.runs.runfiles import read_run
from hpc_grpo.scheduler import local
from hpc_grpo.scheduler.backend import backend_for
from tests.paths import REPO

# A node task stand-in: records its environment, writes "TERM" when signalled, then lives on.
NODE = """
import json, os, signal, sys, time
run = sys.argv[2]
def stop(signum, frame):
    open(os.path.join(run, "signalled"), "a").write(signal.Signals(signum).name + "\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR2, stop)
json.dump(dict(os.environ), open(os.path.join(run, "env.json.tmp"), "w"))
os.replace(os.path.join(run, "env.json.tmp"), os.path.join(run, "env.json"))
print("node task stand-in started", flush=True)
time.sleep(float(sys.argv[3]))
"""


def _run_dir(tmp_path: Path, name: str = "run-1", *, live_s: float = 120, env: str = "") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "node.py").write_text(NODE)
    (run_dir / JOB_SBATCH).write_text(
        "#!/bin/bash\nset -euo pipefail\n" + env
        + f"exec {sys.executable} -u -c \"$(cat {run_dir}/node.py)\" hpc_grpo.runtime.node "
        f"{run_dir} {live_s}\n")
    (run_dir / RUN_JSON).write_text(json.dumps({"scheduler": "local", "site": "my-laptop"}))
    return run_dir


def _files_with_job(run_dir: Path, job_id: str):  # noqa: ANN202 - RunFiles
    (run_dir / JOBS_JSONL).write_text(json.dumps({"job_id": job_id, "event": "submitted",
                                                  "time": time.time()}) + "\n")
    return read_run(run_dir)


def _wait(predicate, timeout_s: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.05)


def test_submit_runs_the_written_script_with_the_env_it_exports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...and without the caller's Slurm variables: submitted from inside an allocation, the
    node task would name every local attempt after that job (slurm-777.0: a cancel's stop
    request kept as the next run's own) and ask Slurm to requeue it after a crash."""
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    run_dir = _run_dir(tmp_path, env="export HPC_GRPO_TEST_MARK=from-profile\n")
    job = backend_for("local").submit(script="ignored: the file is what runs", run_dir=run_dir,
                                      plan=None, python=sys.executable)  # type: ignore[arg-type]
    try:
        _wait(lambda: (run_dir / "env.json").exists())
        env = json.loads((run_dir / "env.json").read_text())
        assert env["HPC_GRPO_TEST_MARK"] == "from-profile"
        assert not [k for k in env if k.startswith("SLURM_")]
        assert local.local_job_alive(job.job_id, run_dir)
        assert os.getpgid(int(job.job_id)) == int(job.job_id)  # its own process group
        assert "stand-in started" in local.node_log(run_dir).read_text()
    finally:
        os.killpg(int(job.job_id), signal.SIGKILL)


def test_submit_does_not_hold_the_callers_pipes(tmp_path: Path) -> None:
    """A CLI under capture (tests, CI, `$(hpc-grpo submit ...)`) returns while the run goes on."""
    run_dir = _run_dir(tmp_path, live_s=5)
    code = ("import sys; from pathlib import Path; from hpc_grpo.scheduler import local; "
            "print(local.start_script(Path(sys.argv[1])))")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(run_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    job_id = proc.stdout.strip()
    try:
        assert proc.returncode == 0, proc.stderr
        assert took < 4.5, f"the caller waited {took:.1f} s for the local run"
        assert local.local_job_alive(job_id, run_dir)
    finally:
        os.killpg(int(job_id), signal.SIGKILL)


def test_cancel_signals_only_its_own_runs_job_and_status_follows(tmp_path: Path) -> None:
    mine, other = _run_dir(tmp_path, "mine"), _run_dir(tmp_path, "other")
    backend = backend_for("local")
    job = backend.submit(script="", run_dir=mine, plan=None, python="")  # type: ignore[arg-type]
    _wait(lambda: (mine / "env.json").exists())
    files = _files_with_job(mine, job.job_id)
    assert files.is_local  # a local-scheduler profile under another name
    try:
        assert backend.views([files])[0].state.state == "RUNNING"
        with pytest.raises(UserError, match="still running"):
            backend.refuse_if_alive(files, "resumed")
        stranger = _files_with_job(other, job.job_id)  # another run claiming the same pid
        assert not local.local_job_alive(job.job_id, other)
        assert backend.cancel(stranger).done is False
        assert local.local_job_alive(job.job_id, mine)
        with pytest.raises(UserError, match="cannot be requeued"):
            backend.requeue(files)
        action = backend.cancel(files)
        assert action.done and f"pid {job.job_id}" in action.message
        _wait(lambda: not local.local_job_alive(job.job_id, mine))
    finally:
        if local.local_job_alive(job.job_id, mine):
            os.killpg(int(job.job_id), signal.SIGKILL)
    assert (mine / "signalled").read_text() == "SIGTERM\n"  # as scancel sends
    # Issue #58: a cancelled local run showed ENDED (FAILED before its rank 0 wrote a phase):
    # the cancel is recorded in jobs.jsonl, as the Slurm back end does, and the run is CANCELLED
    lines = [json.loads(x) for x in (mine / JOBS_JSONL).read_text().splitlines()]
    assert [line["event"] for line in lines] == ["submitted", "cancelled"]
    cancelled = backend.views([read_run(mine)])[0].state
    assert (cancelled.state, cancelled.finished) == ("CANCELLED", True)
    assert "hpc-grpo resume" in cancelled.meaning
    submitted = lines[0]["time"]
    (mine / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 3,
                                                 "started": submitted + 1}))
    assert backend.views([read_run(mine)])[0].state.state == "CANCELLED"
    # Without the cancel (a signal, its time limit) the real ranks save at the step end and
    # write phase interrupted, exiting 0: not a failure.
    (mine / JOBS_JSONL).write_text(json.dumps(lines[0]) + "\n")
    stopped = backend.views([read_run(mine)])[0].state
    assert (stopped.state, stopped.finished) == ("ENDED", True)
    assert "stopped at a checkpoint" in stopped.meaning and "hpc-grpo resume" in stopped.meaning
    # An earlier job's interrupted phase, this job (a resume) dead before its rank 0 wrote one:
    (mine / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 3,
                                                 "started": submitted - 60}))
    assert backend.views([read_run(mine)])[0].state.state == "FAILED"
    backend.refuse_if_alive(files, "resumed")  # over: no refusal
    assert backend.cancel(files).done is False


def test_signal_reaches_the_job_and_a_bad_name_is_refused(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    backend = backend_for("local")
    job = backend.submit(script="", run_dir=run_dir, plan=None, python="")  # type: ignore[arg-type]
    _wait(lambda: (run_dir / "env.json").exists())
    files = _files_with_job(run_dir, job.job_id)
    try:
        with pytest.raises(UserError, match="not a signal name"):
            backend.signal(files, "NOPE")
        assert backend.signal(files, "USR2").done
        _wait(lambda: not local.local_job_alive(job.job_id, run_dir))
    finally:
        if local.local_job_alive(job.job_id, run_dir):
            os.killpg(int(job.job_id), signal.SIGKILL)
    assert (run_dir / "signalled").read_text() == "SIGUSR2\n"


def test_a_run_of_the_previous_release_is_still_recognised(tmp_path: Path) -> None:
    """Runs submitted before this release ran under submitit's local controller: status and
    cancel still find them (argv: `python -m submitit.local._local RUN_DIR/submitit`)."""
    run_dir = tmp_path / "old-run"
    folder = run_dir / "submitit"
    folder.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "submitit.local._local", str(folder)], start_new_session=True)
    try:
        _wait(lambda: local.local_job_alive(str(proc.pid)))  # once the child has exec'd
        assert local.local_job_alive(str(proc.pid), run_dir)
        assert not local.local_job_alive(str(proc.pid), tmp_path / "another")
    finally:
        proc.kill()
        proc.wait()
    assert not local.local_job_alive(str(proc.pid), run_dir)
    assert not local.local_job_alive(str(os.getpid())) and not local.local_job_alive("x")
