"""The ranks' temporary folder, one per attempt and node, under the run directory, never /tmp
(issue #27); where their libraries write is rundir/workspace.py's rule. The node task puts
``scratch_env`` into torchrun's environment (task.py ``child_env``) and removes the attempt's
TMPDIR when the attempt ends. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.workspace import SCRATCH, Workspace, fits_sockets, library_dirs

OWNER = ".hpc-grpo-run"  # in each scratch folder: the run directory it belongs to


def scratch_dir(run: RunRecord, attempt: str, env: Mapping[str, str]) -> Path:
    """This attempt's and node's temporary folder: in the run directory, unless its path leaves
    too little room for a unix socket's name under it, then in the node's own temp dir."""
    name = f"{attempt}.{env.get('SLURM_NODEID') or '0'}"
    inside = Path(run.run_dir) / SCRATCH / name
    if fits_sockets(inside):
        return inside
    base = env.get("TMPDIR") or "/tmp"
    return Path(base) / f"{_outside_prefix(run)}{name}"


def _outside_prefix(run: RunRecord) -> str:
    """The name prefix of the run's scratch folders in a node's temp dir."""
    return f"hpc-grpo-{Path(run.run_dir).name}-"


def make_scratch(run: RunRecord, attempt: str, env: Mapping[str, str]) -> Path:
    """Create this attempt's scratch folder (its ``OWNER`` file names the run directory) after
    removing what earlier attempts of this run on this node left: a node task killed with
    SIGKILL (a node failure, an OOM kill, ``scancel --signal=KILL``) cannot remove its own, and
    one in the node's temp dir is outside the run's folders. Only folders whose ``OWNER`` names
    this run directory are removed, never another attempt's of this one (the other nodes of a
    sandbox share /tmp) nor another run's of the same name in another output root. In a shared
    temp dir only this user's real folders are candidates (a link or another account's folder
    with a forged ``OWNER`` file is never followed or removed), and the attempt's own folder is
    made private (0700); one found there already that is not this user's private folder is an
    error, not a TMPDIR for the ranks' sockets."""
    scratch = scratch_dir(run, attempt, env)
    prefix = "" if scratch.parent == Path(run.run_dir) / SCRATCH else _outside_prefix(run)
    for old in scratch.parent.glob(f"{prefix}*"):
        if old.name.removeprefix(prefix).rsplit(".", 1)[0] == attempt or \
                not (_own_folder(old) if prefix else old.is_dir()):
            continue  # this attempt's, on another node of a shared /tmp; or not ours
        try:
            owner = (old / OWNER).read_text(encoding="utf-8")
        except (OSError, ValueError):  # unreadable, or not this project's: left alone
            continue
        if owner == run.run_dir:
            shutil.rmtree(old, ignore_errors=True)
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700 if prefix else 0o777)
    if prefix and not (_own_folder(scratch) and scratch.stat().st_mode & 0o022 == 0):
        raise OSError(f"scratch folder {scratch} exists and is not this user's private folder "
                      "(a link, another account's, or writable by others): remove it, or set "
                      "TMPDIR to a private folder")
    (scratch / OWNER).write_text(run.run_dir)
    return scratch


def _own_folder(path: Path) -> bool:
    """A real folder (not a link) of this process's user."""
    try:
        return not path.is_symlink() and path.is_dir() and path.stat().st_uid == os.getuid()
    except OSError:
        return False


def scratch_env(run: RunRecord, attempt: str, env: Mapping[str, str]) -> dict[str, str]:
    """Where the ranks' libraries write temporary and cache files: rundir/workspace.py's one
    rule for the run directory, TMPDIR being this attempt's scratch_dir, which the node task
    removes when the attempt ends (issue #27: W&B made two empty temp folders per rank and
    attempt in /tmp even with report_to none, torchrun /tmp/torchelastic_*, W&B debug logs and
    the datasets cache went to ~/.cache)."""
    if not run.run_dir:
        return {}
    work = Workspace.of_run(run.run_dir, run.model_load.hf_home)
    return library_dirs(work, scratch_dir(run, attempt, env), env)
