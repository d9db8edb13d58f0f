"""The runtime's only Slurm calls run here: ``scontrol``, and the node task's ``sbatch`` and
``scancel`` (a job resubmitted without a dead node, runtime/node/replace.py), in one runner.

The launcher's scheduler/slurm.py cannot be imported on a node (runtime/ never imports the
launcher side), so Slurm's commands run here for the node task (runtime/node/slurm_facts.py) and
for doctor's probe (runtime/probe.py). Every call is bounded and never raises: a slurmctld that
does not answer never hangs a node.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence

TIMEOUT_S = 5.0


def _ignore_term() -> None:  # runs in the child before exec; SIG_IGN survives exec
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def slurm_command(binary: str, args: Sequence[str], *, timeout_s: float = TIMEOUT_S,
                  env: Mapping[str, str] | None = None,
                  outlive_term: bool = False) -> tuple[str, str]:
    """``BINARY ARGS``' output and "", or "" and one line saying why it failed (its last line
    of output, the timeout, no binary). ``env``: the command's whole environment (None: this
    process's). ``outlive_term``: the command ignores SIGTERM, for a node task that goes on
    after cancelling its own job: Slurm's SIGTERM to the job's processes arrives while its next
    command runs (seen on the sandbox: ``scontrol update`` right after ``scancel`` of the own
    job ended by signal 15); the SIGKILL KillWait later still ends it."""
    command = " ".join([binary, *args])
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True,
                              timeout=timeout_s, check=False,
                              env=dict(env) if env is not None else None,
                              preexec_fn=_ignore_term if outlive_term else None)
    except subprocess.TimeoutExpired:
        return "", f"{command} timed out"
    except OSError as err:
        return "", f"{command} failed: {err.strerror or err}"
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return "", f"{command} failed: {said[-1] if said else f'exit code {done.returncode}'}"
    return done.stdout or "", ""


def scontrol(args: Sequence[str], *, timeout_s: float = TIMEOUT_S,
             binary: str = "scontrol", outlive_term: bool = False) -> tuple[str, str]:
    """``scontrol ARGS``' output and "", or "" and one line saying why it failed: a slurmctld
    that does not answer never hangs a node."""
    return slurm_command(binary, args, timeout_s=timeout_s, outlive_term=outlive_term)
