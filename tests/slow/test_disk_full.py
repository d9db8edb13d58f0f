"""A save that would not fit is skipped, on a real full file system (#15): the run directory on
a 4 MiB tmpfs (root only), builtin:tiny checkpoints of about 1.4 MB every step. The first
saves fit; later ones are skipped with one line in each rank's log and state.json's
checkpoint_skipped, the run still finishes, and the newest complete checkpoint is intact.
Slow: one 4-step CPU run (about 25 s). `pytest -m slow tests/slow/test_disk_full.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hpc_grpo.runtime.rank.checkpoints.folders import is_complete, newest_complete
from tests.slow.runtime_slow_helpers import metrics, run_node, state, tiny_model, write_run

pytestmark = pytest.mark.slow
__all__ = ["tiny_model"]  # the module fixture, shared


@pytest.fixture
def small_fs(tmp_path: Path) -> Path:
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
            capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_saves_that_do_not_fit_are_skipped_and_the_run_finishes(tiny_model: Path,
                                                                small_fs: Path) -> None:
    run_dir = small_fs / "run"
    write_run(run_dir, tiny_model, steps=4)
    record = json.loads((run_dir / "run.json").read_text())
    record["grpo_config"].update(save_steps=1, save_total_limit=10)
    (run_dir / "run.json").write_text(json.dumps(record))
    proc = run_node(run_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    st = state(run_dir)
    assert st["phase"] == "done" and [m["step"] for m in metrics(run_dir)] == [1, 2, 3, 4]
    skipped = st["checkpoint_skipped"]
    assert skipped and "skipped: it needs" in skipped and "GiB are free under" in skipped, st
    saved = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert saved and saved[-1] < 4 and all(
        is_complete(run_dir / "checkpoints" / f"checkpoint-{s}") for s in saved), saved
    assert newest_complete(run_dir / "checkpoints") == run_dir / "checkpoints" / f"checkpoint-{saved[-1]}"
    for rank in (0, 1):  # every rank agreed to skip the same saves
        log = (run_dir / "logs" / f"rank-{rank}.log").read_text()
        assert f"[checkpoint] checkpoint at step {saved[-1] + 1} skipped" in log
