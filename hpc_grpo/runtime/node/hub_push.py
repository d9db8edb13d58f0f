"""push_to_hub on a site whose nodes reach the hub: the rank-0 node task, once training is done,
runs `hpc-grpo export RUN_DIR --push REPO` (run.json's ``hub`` block with ``on_node``).

It runs the command as a separate process, so the node task imports nothing of the launcher:
the export and the push are exactly what a user gets on a login node (the checked export of
the newest complete checkpoint, written beside its target and renamed, exports.jsonl; the
upload, pushes.jsonl). The token is the job's own ``HF_TOKEN`` (a secret name of the profile:
it reaches the job, never its files). Whatever happens, the run stays done: a failed export or
push is a line in the node log, its output is logs/hub-push.log, and `status` shows the push
pending with the command to run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.state import RunState

HUB_PUSH_LOG = "hub-push.log"  # in LOGS


def argv(run: RunRecord, python: str = sys.executable) -> list[str]:
    assert run.hub is not None
    visibility = [] if run.hub.private is None else ["--private" if run.hub.private else "--public"]
    return [python, "-m", "hpc_grpo.cli", "export", run.run_dir, "--push", run.hub.repo_id,
            *visibility]


def at_end(run: RunRecord, state: RunState, attempt: str, python: str = "") -> int | None:
    """Export and push when this attempt finished training and run.json asks for it on the
    node; the command's exit code, None when there was nothing to do."""
    if run.hub is None or not run.hub.on_node or not (state.is_attempt(attempt)
                                                        and state.phase == "done"):
        return None
    log = Path(run.run_dir) / contract.LOGS / HUB_PUSH_LOG
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "HF_HUB_OFFLINE": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    command = argv(run, python or sys.executable)
    print(f"[node] push_to_hub: {' '.join(command[2:])} (log {log})", flush=True)
    with log.open("ab") as out:
        rc = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, env=env, cwd=run.run_dir, check=False).returncode
    print("[node] push_to_hub: " + ("done" if rc == 0 else f"failed (exit {rc}): see {log}; "
          "`hpc-grpo status` gives the command to run again"), flush=True)
    return rc
