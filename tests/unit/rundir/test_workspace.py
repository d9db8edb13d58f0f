"""rundir/workspace.py: the one rule of where a child's libraries write (issues #27, #58), and a
one-off child's temporary folder (export, eval, push)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_grpo.rundir import workspace
from hpc_grpo.rundir.workspace import Workspace, child_scratch, library_dirs


def test_temporaries_in_the_folder_caches_shared_in_the_root_the_users_own_win() -> None:
    work = Workspace.of_run("/runs/r")
    env = library_dirs(work, Path("/runs/r/tmp/x"), {})
    assert env["TMPDIR"] == "/runs/r/tmp/x"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/runs/.compile-cache/inductor"
    assert env["HF_DATASETS_CACHE"] == "/runs/.datasets-cache"
    assert env["WANDB_CACHE_DIR"] == "/runs/r/cache/wandb"
    mine = library_dirs(work, Path("/t"), {"TORCHINDUCTOR_CACHE_DIR": "/mine", "HF_HOME": "/hf",
                                           "TMPDIR": "/node"})
    assert "TORCHINDUCTOR_CACHE_DIR" not in mine and "HF_DATASETS_CACHE" not in mine
    assert mine["TMPDIR"] == "/t"  # set, not defaulted: the folder removed with the child
    assert "HF_DATASETS_CACHE" not in library_dirs(Workspace.of_run("/r", "/shared/hf"),
                                                   Path("/t"), {})


def test_a_childs_scratch_is_removed_after_it_and_a_killed_ones_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "UNIX_SOCKET_ROOM", 1000)
    run = tmp_path / "r"
    dead = run / "tmp" / "eval-999999999"  # no such process: killed, its folder left
    dead.mkdir(parents=True)
    other = run / "tmp" / "slurm-7.0.0"  # an attempt's of the ranks: not the child's to remove
    other.mkdir()
    with child_scratch(Workspace.of_run(run), "eval", {}) as (scratch, env):
        assert scratch == run / "tmp" / f"eval-{os.getpid()}" and scratch.is_dir()
        assert env["TMPDIR"] == str(scratch)
        assert not dead.exists() and other.exists()
    assert not scratch.exists()


def test_a_deep_run_directory_keeps_unix_sockets_possible(tmp_path: Path) -> None:
    """vLLM (eval on a GPU) puts IPC sockets in TMPDIR: too deep a run directory gets a private
    folder in the caller's temp dir instead, removed all the same."""
    deep = tmp_path / ("x" * 80)
    mine = tmp_path / "t"
    mine.mkdir()
    with child_scratch(Workspace.of_run(deep), "eval", {"TMPDIR": str(mine)}) as (scratch, _):
        assert scratch.parent == mine and scratch.name.startswith("hpc-grpo-eval-")
        assert scratch.stat().st_mode & 0o077 == 0
    assert list(mine.iterdir()) == []
