"""push_to_hub on a site whose nodes reach the hub: the rank-0 node task, once training is done,
runs `hpc-grpo export RUN_DIR --here --push REPO` (run.json's ``hub`` block with ``on_node``):
``--here``, never a job submitted from inside this one, within the job's time left.

It runs the command as a separate process, so the node task imports nothing of the launcher:
the export and the push are exactly what a user gets on a login node (the checked export of
the newest complete checkpoint, written beside its target and renamed, exports.jsonl; the
upload, pushes.jsonl). The token is the job's own ``HF_TOKEN`` (a secret name of the profile:
it reaches the job, never its files). Whatever happens, the run stays done: a failed export or
push is a line in the node log, its output is logs/hub-push.log (with one line where it ran out of
time and was killed), and `status` shows the push pending with the command to run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hub import export_argv, push_args, push_command
from hpc_grpo.rundir.state import RunState

HUB_PUSH_LOG = "hub-push.log"  # in LOGS
DEFAULT_TIMEOUT_S = 2 * 3600.0  # where the job's time left is unknown: a 7B export and upload
MARGIN_S = 120.0  # of the job's time left, kept for the node task to log and end before Slurm's kill
TIMED_OUT = 124  # the exit code of a push stopped at its time bound (timeout(1)'s)


def argv(run: RunRecord, python: str = sys.executable) -> list[str]:
    """`hpc-grpo export RUN_DIR --here --push REPO`: ``--here``, the node is where it runs (never
    a nested job submitted from inside the training job)."""
    assert run.hub is not None
    return export_argv(python, run.run_dir, *push_args(run.hub.repo_id, run.hub.private))


def timeout_s(left: float | None) -> float:
    """The push's time bound: the job's time left less ``MARGIN_S`` (at least a second), else
    ``DEFAULT_TIMEOUT_S``."""
    return DEFAULT_TIMEOUT_S if left is None else max(1.0, left - MARGIN_S)


def _run(command: list[str], log: Path, env: dict[str, str], cwd: str, limit: float) -> int:
    """The command in a session of its own, output to ``log``; past ``limit`` seconds it and
    every process it started are killed (the export's torch child too) and TIMED_OUT returned."""
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return TIMED_OUT


def at_end(run: RunRecord, state: RunState, attempt: str, python: str = "",
           left: float | None = None) -> int | None:
    """Export and push when this attempt finished training and run.json asks for it on the
    node, within the job's time ``left`` (seconds, None unknown: ``timeout_s``); the command's
    exit code (TIMED_OUT when stopped), None when there was nothing to do."""
    if run.hub is None or not run.hub.on_node or not (state.is_attempt(attempt)
                                                        and state.phase == "done"):
        return None
    log = Path(run.run_dir) / contract.LOGS / HUB_PUSH_LOG
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "HF_HUB_OFFLINE": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    command = argv(run, python or sys.executable)
    limit = timeout_s(left)
    print(f"[node] push_to_hub: {' '.join(command[2:])} (log {log}, at most {limit:.0f} s)",
          flush=True)
    rc = _run(command, log, env, run.run_dir, limit)
    again = push_command(run.run_id, run.hub)
    if rc == TIMED_OUT:
        why = ("the job's time left, less " f"{MARGIN_S:.0f} s to end" if left is not None
               else "hpc-grpo's default bound")
        with log.open("a") as out:
            out.write(f"hpc-grpo: push_to_hub stopped after {limit:.0f} s ({why}): on the login "
                      f"node, `{again}`\n")
    print("[node] push_to_hub: " + (
        "done" if rc == 0 else f"timed out after {limit:.0f} s: see {log}; `hpc-grpo status` "
        "gives the command to run again" if rc == TIMED_OUT else
        f"failed (exit {rc}): see {log}; `hpc-grpo status` gives the command to run again"),
        flush=True)
    return rc
