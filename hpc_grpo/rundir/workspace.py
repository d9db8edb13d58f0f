"""Where a child's libraries write temporary and cache files: inside the run's folders, never
/tmp or ~/.cache (issues #27 and #58). The one rule, for every child Python that runs the
training stack: the ranks and a `vllm serve` (runtime/node/environment.py, with the attempt's
scratch of runtime/node/scratch.py), the export, eval and push children (export/child.py) and
the login node's inputs probe (preflight/inputs.py). Stdlib only: both sides apply it.

A child gets a ``Workspace``: ``folder``, the run directory (for a model folder of no run,
hpc-grpo's own folder for it: export/evaluate.py), and ``root``, the folder of the caches shared
by its runs (the output root: compile caches and a hub dataset's Arrow files, so that a requeue,
the next run and an eval start warm). ``library_dirs`` is what goes into the child's environment:
TMPDIR is set (tempfile, torchelastic, W&B's temp folders, vLLM's IPC sockets, and everything
that defaults to ``tempfile.gettempdir()``); the rest is defaulted, never forced: a cache the
user or site set wins, and the datasets cache stays in the site's ``hf_home`` or the user's
HF_HOME where there is one. The hub cache of the models themselves is left alone (reading a
shared one is expected).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

SCRATCH = "tmp"  # in the run directory: temporaries, one folder per attempt and node or child
CACHE = "cache"  # in the run directory: what W&B and matplotlib would put in ~/.cache
COMPILE_CACHE = ".compile-cache"  # in the root: vLLM's, torch inductor's and Triton's
DATASETS_CACHE = ".datasets-cache"  # in the root: a dataset's Arrow files, shared by its runs
UNIX_SOCKET_ROOM = 60  # AF_UNIX paths end at 107 bytes; vLLM puts ZMQ IPC sockets in TMPDIR


@dataclass(frozen=True)
class Workspace:
    """A child's folder and the root of its shared caches; ``hf_home``: the site's hub cache
    the run reads (its ``datasets/`` then holds the datasets cache)."""

    folder: Path
    root: Path
    hf_home: str = ""

    @classmethod
    def of_run(cls, run_dir: str | os.PathLike[str], hf_home: str = "") -> Workspace:
        """A run directory's: its output root shares the caches."""
        return cls(Path(run_dir), Path(run_dir).parent, hf_home)


def library_dirs(work: Workspace, tmpdir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The child's TMPDIR (``tmpdir``) and its libraries' caches, inside ``work``'s folders
    unless ``env`` (the environment the child inherits) names its own."""
    cache, compiled = work.folder / CACHE, work.root / COMPILE_CACHE
    defaults = {"WANDB_DIR": str(work.folder), "WANDB_CACHE_DIR": str(cache / "wandb"),
                "WANDB_CONFIG_DIR": str(cache / "wandb-config"),
                "WANDB_DATA_DIR": str(cache / "wandb-data"),
                "MPLCONFIGDIR": str(cache / "matplotlib"),
                "VLLM_CACHE_ROOT": str(compiled / "vllm"),
                "TORCHINDUCTOR_CACHE_DIR": str(compiled / "inductor"),
                "TRITON_CACHE_DIR": str(compiled / "triton")}
    if not (work.hf_home or env.get("HF_HOME")):
        defaults["HF_DATASETS_CACHE"] = str(work.root / DATASETS_CACHE)
    out = {"TMPDIR": str(tmpdir)}
    out.update({key: value for key, value in defaults.items() if not env.get(key)})
    return out


def fits_sockets(folder: Path) -> bool:
    """Whether a TMPDIR at ``folder`` leaves room for a unix socket's name under it."""
    return len(str(folder)) <= UNIX_SOCKET_ROOM


@contextlib.contextmanager
def child_scratch(work: Workspace, name: str, env: Mapping[str, str]) -> Iterator[
        tuple[Path, dict[str, str]]]:
    """A one-off child's temporary folder (``SCRATCH/NAME-PID`` in ``work.folder``) and its
    ``library_dirs``, removed when the child is done; one left by a killed process of the same
    ``name`` is removed first. Where its path is too long for a unix socket under it, a private
    folder in this machine's temp dir, removed all the same."""
    base = work.folder / SCRATCH
    inside = base / f"{name}-{os.getpid()}"
    for old in base.glob(f"{name}-*") if base.is_dir() else ():
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    if fits_sockets(inside):
        inside.mkdir(parents=True, exist_ok=True)
        scratch = inside
    else:
        scratch = Path(tempfile.mkdtemp(prefix=f"hpc-grpo-{name}-", dir=env.get("TMPDIR")))
    try:
        yield scratch, library_dirs(work, scratch, env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def alive(pid: int) -> bool:
    """Whether a process of this id exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
