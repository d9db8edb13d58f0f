"""The local back end: a run on this machine through submitit's LocalExecutor, no Slurm.

The job id is the controller's pid; alive-ness is read from /proc so a reused pid never passes.
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def _children_write_to(path: Path) -> Iterator[None]:
    """Children started here get `path` as stdout/stderr instead of ours: a local run must not
    hold the caller's pipes open (a CLI run under capture would otherwise wait for training)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("ab") as log:
        try:
            for fd in (1, 2):
                os.dup2(log.fileno(), fd)
            yield
        finally:
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)


def submit_local(*, folder: Path, task: Callable[[], object], timeout_min: int, gpus: int = 0) -> str:
    """Run `task` on this machine through submitit's LocalExecutor; returns its controller pid.

    submitit sets CUDA_VISIBLE_DEVICES to the GPUs asked for (empty for none), so the GPUs the
    caller sees are passed on explicitly.
    """
    from submitit.local.local import LocalExecutor

    executor = LocalExecutor(folder)
    visible = [int(v) for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip().isdigit()]
    extra = {"gpus_per_node": gpus, "visible_gpus": visible[:gpus] or list(range(gpus))} if gpus else {}
    executor.update_parameters(timeout_min=timeout_min, tasks_per_node=1, **extra)
    Path(folder).mkdir(parents=True, exist_ok=True)
    with _children_write_to(Path(folder) / "local_controller.log"):
        job = executor.submit(task)
    return str(job.job_id)


def local_job_alive(job_id: str, folder: Path | None = None) -> bool:
    """Whether a local run's controller still runs (not a zombie, not a reused pid). With
    `folder`, also that it is the controller of that submitit folder, not another run's that
    got the same pid."""
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
    try:
        stat = Path(f"/proc/{job_id}/stat").read_text()
        cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z" or b"submitit.local._local" not in cmdline:
        return False
    if folder is None:
        return True
    wanted = {str(folder), str(Path(folder).resolve())}
    return any(arg.decode(errors="replace") in wanted for arg in cmdline.split(b"\0"))


def cancel_local(job_id: str, folder: Path | None = None) -> None:
    """Stop a local run as submitit does: SIGINT to the controller, which then kills its tasks."""
    if local_job_alive(job_id, folder):
        os.kill(int(job_id), _signal.SIGINT)
