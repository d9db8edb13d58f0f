"""The local back end: the rendered job script, run as it is on this machine, no Slurm.

``submit`` starts ``bash job.sbatch`` (the file ``render`` printed and the run directory keeps)
in a session of its own, so the profile's ``env``, the time limit and the node task reach the
ranks exactly as the script says; the job id is that session leader's pid. What a Slurm cluster
does around a job is done here by the script and this module: the time limit is ``timeout``'s
(the requeue signal ``signal_lead_s`` before the end, SIGKILL at it), cancel is SIGTERM to the
job's process group (Slurm's scancel), a signal goes to the same group (``scancel --signal``),
and there is no requeue: an interrupted local run continues with ``hpc-grpo resume``.

Runs submitted by earlier releases ran under submitit's LocalExecutor; their controllers are
still recognised, so ``status`` and ``cancel`` of such a run directory keep working.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal as _signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import JOB_SBATCH, LOCAL_NODE_LOG, LOGS, SUBMITIT
from hpc_grpo.rundir.contract import signal_name as signal_name_of
from hpc_grpo.rundir.view import RunView, append_job_line
from hpc_grpo.scheduler.backend import Action, SideJob, Submission
from hpc_grpo.scheduler.jobstate import JobView, local_view

if TYPE_CHECKING:  # the plan's type only: status and cancel never load the planner
    from hpc_grpo.planner.job import JobPlan

NODE_TASK_MODULE = b"hpc_grpo.runtime.node"  # what the script execs (local.sh.j2)
_OLD_CONTROLLER = b"submitit.local._local"  # runs submitted before the script ran as is


def node_log(run_dir: Path) -> Path:
    """The node task's own output (Slurm's is in submitit/ under the job id)."""
    return Path(run_dir) / LOGS / LOCAL_NODE_LOG


def without_slurm(env: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment less Slurm's: submitted from inside an allocation (``salloc``,
    an interactive ``srun``), a local run would take that job for its own: the node task names
    its attempts after SLURM_JOB_ID (every local run and resume one id, so a cancel's stop
    request is kept as the next run's own) and asks Slurm to requeue that job after a crash."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_")}


def start_script(run_dir: Path) -> str:
    """Run ``run_dir/job.sbatch`` with bash in a new session; returns the leader's pid.

    Output goes to the node log, never to the caller's pipes (a CLI under capture would wait
    for training), and standard input is closed. A thread reaps the child if this process
    outlives it, so a finished run never lingers as a zombie that looks alive.
    """
    log = node_log(run_dir)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(["bash", str(Path(run_dir) / JOB_SBATCH)], cwd=str(run_dir),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=without_slurm(os.environ))
    job_id = str(proc.pid)
    # Until the child has exec'd bash, /proc shows this process's argv under its pid: wait for
    # it, so that a status right after submit never reads a starting run as ended.
    deadline = time.monotonic() + 10
    while not local_job_alive(job_id, run_dir) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return job_id


def _cmdline(job_id: str) -> list[bytes] | None:
    """A live (not zombie) process's argv, None when there is none under that pid."""
    try:
        stat = Path(f"/proc/{job_id}/stat").read_text()
        cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes()
    except OSError:
        return None
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return None
    return cmdline.split(b"\0")


def local_job_alive(job_id: str, run_dir: Path | None = None) -> bool:
    """Whether a local run's job still runs under ``job_id`` (not a zombie, not a reused pid):
    its process runs the node task (or, for an older run, submitit's local controller). With
    ``run_dir``, also that it is that run's, not another run's that got the same pid."""
    if not job_id.isdigit():
        return False
    if not Path("/proc/self").exists():  # not Linux: the pid exists, nothing more to check
        try:
            os.kill(int(job_id), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    argv = _cmdline(job_id)
    if argv is None:
        return False
    joined = b" ".join(argv)
    script = argv[1].decode(errors="replace") if len(argv) > 1 else ""
    starting = argv[0].endswith(b"bash") and script.endswith("/" + JOB_SBATCH)  # before its exec
    if NODE_TASK_MODULE not in joined and _OLD_CONTROLLER not in joined and not starting:
        return False
    if run_dir is None:
        return True
    wanted = set()
    for folder in (Path(run_dir), Path(run_dir) / SUBMITIT):
        wanted |= {str(folder), str(folder.resolve())}
    if starting:
        return str(Path(script).parent) in wanted
    return any(arg.decode(errors="replace") in wanted for arg in argv)


def _send(job_id: str, run_dir: Path, signum: int) -> None:
    """A signal to the run's job: its whole process group (the script's session, as Slurm
    signals every process of a step), or to an older run's submitit controller."""
    argv = _cmdline(job_id) or []
    if any(_OLD_CONTROLLER in arg for arg in argv):
        os.kill(int(job_id), _signal.SIGINT if signum == _signal.SIGTERM else signum)
        return
    with contextlib.suppress(ProcessLookupError):  # ended between the check and now
        os.killpg(int(job_id), signum)


class LocalBackend:
    """This machine as a one-node cluster: see the module docstring."""

    name = "local"
    follow_by_default = True

    def check(self, plan: JobPlan) -> None:
        """Nothing to ask before submitting: the plan already holds a local run to one node."""

    def submit(self, *, script: str, run_dir: Path, plan: JobPlan, python: str) -> Submission:
        del script, plan, python  # the script is run from the run directory, as written there
        return Submission(start_script(run_dir))

    def views(self, runs: Sequence[RunView]) -> list[JobView]:
        return [local_view(files, local_job_alive(files.job_id, files.run_dir))
                for files in runs]

    def refuse_if_alive(self, files: RunView, verb: str) -> None:
        if files.job_id and local_job_alive(files.job_id, files.run_dir):
            raise UserError(f"run {files.run_id} is still running (pid {files.job_id})",
                            field="run", hint=f"wait for it or `hpc-grpo cancel {files.run_id}` first")

    def _act(self, files: RunView, verb: str, signum: int) -> Action:
        run, job_id = files.run_id, files.job_id
        if not local_job_alive(job_id, files.run_dir):
            return Action(run, job_id, False, f"run {run} is not running: nothing {verb}")
        _send(job_id, files.run_dir, signum)
        append_job_line(files.run_dir, job_id, verb)  # as the Slurm back end: status reads it
        return Action(run, job_id, True, f"{verb} local run {run} (pid {job_id})")

    def cancel(self, files: RunView) -> Action:
        """SIGTERM, as scancel: the ranks checkpoint at the step end and stop; ``timeout`` in
        the script kills what is left ``signal_lead_s`` later."""
        action = self._act(files, "cancelled", _signal.SIGTERM)
        if not action.done:
            return action
        return dataclasses.replace(action, message=f"{action.message}: its ranks stop before "
                                   "their first step, or save a checkpoint at the step end")

    def signal(self, files: RunView, signal_name: str) -> Action:
        try:
            signum = _signal.Signals["SIG" + signal_name_of(signal_name)]
        except KeyError:
            raise UserError(f"not a signal name: {signal_name!r}", field="signal") from None
        return self._act(files, "signalled", signum)

    def requeue(self, files: RunView) -> Action:
        raise UserError(f"a local run cannot be requeued ({files.run_id})", field="run",
                        hint=f"signal it to stop, then `hpc-grpo resume {files.run_id}`")

    def node_logs(self, run_dir: Path) -> list[Path]:
        old = sorted((Path(run_dir) / SUBMITIT).glob("*_log.*"))  # earlier releases
        return [p for p in (node_log(run_dir),) if p.exists()] + old

    def submit_side_job(self, job: SideJob) -> Submission:
        """``bash SCRIPT`` in a session of its own, output to its log (no memory or time limit:
        this machine is the node)."""
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with job.log.open("ab") as out:
            proc = subprocess.Popen(["bash", str(job.script)], cwd=str(job.script.parent),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
        return Submission(str(proc.pid))

    def side_job_state(self, job_id: str, script: Path) -> str:
        argv = _cmdline(job_id) if job_id.isdigit() else None
        return "RUNNING" if argv and str(script).encode() in argv else "ENDED"
