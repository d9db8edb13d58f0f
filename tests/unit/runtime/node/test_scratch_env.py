"""Issue #27: nothing of a run outside its folders. The node task points the ranks' temporary
and cache files (tempfile and torchelastic through TMPDIR, W&B, the datasets cache, matplotlib)
at the run directory and removes the attempt's temporaries when it ends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import RUN_JSON, RunRecord
from hpc_grpo.runtime.node import task as node


def record(run_dir: str, **over: Any) -> RunRecord:
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": run_dir, "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                                **over})


def test_every_cache_and_temp_folder_is_under_the_run_directory(tmp_path: Path) -> None:
    run_dir = "/runs/grpo-tiny-0001"
    env = node.child_env({"HOME": "/home/u", "SLURM_NODEID": "1"}, "slurm-7.0", record(run_dir))
    assert env["TMPDIR"] == f"{run_dir}/tmp/slurm-7.0.1"  # one per attempt and node
    for key in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                "MPLCONFIGDIR"):
        assert env[key].startswith(run_dir), key
    assert env["HF_DATASETS_CACHE"] == "/runs/.datasets-cache"  # shared by the root's runs


def test_the_users_and_the_sites_caches_win() -> None:
    run = record("/runs/r", model_load={"hf_home": "/shared/hf"})
    env = node.child_env({"WANDB_CACHE_DIR": "/mine/wandb"}, "a", run)
    assert env["WANDB_CACHE_DIR"] == "/mine/wandb"
    assert "HF_DATASETS_CACHE" not in env and env["HF_HOME"] == "/shared/hf"  # hf_home/datasets
    assert "HF_DATASETS_CACHE" not in node.child_env({"HF_HOME": "/mine/hf"}, "a",
                                                     record("/runs/r"))


def test_a_long_run_directory_keeps_unix_sockets_possible() -> None:
    """vLLM's ZMQ IPC sockets live in TMPDIR and AF_UNIX paths end at 107 bytes: a deep run
    directory gets its scratch in the node's own temp dir (removed at the end all the same)."""
    deep = "/lustre/project/a-rather-long-group-name/" + "x" * 40 + "/grpo-qwen2.5-math-72b-0001"
    env = node.child_env({"TMPDIR": "/local/job7"}, "slurm-7.0", record(deep))
    assert env["TMPDIR"] == "/local/job7/hpc-grpo-grpo-qwen2.5-math-72b-0001-slurm-7.0.0"
    assert len(env["TMPDIR"]) + 1 + 36 < 107


def test_the_attempts_temporaries_are_removed_when_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / RUN_JSON).write_text(json.dumps(record(str(run_dir)).to_dict()))
    seen: list[Path] = []

    class Torchrun:
        def __init__(self, argv: list[str], env: dict[str, str], **_: Any) -> None:
            scratch = Path(env["TMPDIR"])
            assert scratch.is_dir()  # made before torchrun starts
            (scratch / "torchelastic_abc").mkdir()
            (scratch / "torchelastic_abc" / "error.json").write_text("{}")
            seen.append(scratch)

        def wait(self) -> int:
            rundir.update_state(run_dir, attempt=attempt, phase="done")
            return 0

    attempt = "local-1-x"
    monkeypatch.setattr(node, "attempt_id", lambda env: attempt)
    monkeypatch.setattr(node.subprocess, "Popen", Torchrun)
    monkeypatch.setattr(node.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(
        argv, 0))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert node.NodeTask(str(run_dir), chain_signals=False)() == 0
    assert seen and not seen[0].exists()


def test_a_killed_attempts_scratch_goes_with_the_next_attempt_and_nothing_else(
        tmp_path: Path) -> None:
    """A node task killed with SIGKILL leaves its scratch (in the node's temp dir for a deep run
    directory): the next attempt of the run on that node removes it, and only what is the run's
    own: not the current attempt's other node (the sandbox's nodes share /tmp), not a run of the
    same name in another output root, not a folder it did not make."""
    from hpc_grpo.runtime.node.scratch import OWNER, make_scratch

    deep = str(tmp_path / ("x" * 70) / "grpo-tiny-0001")
    other_root = str(tmp_path / ("y" * 70) / "grpo-tiny-0001")
    base = tmp_path / "node-tmp"
    base.mkdir()
    env = {"TMPDIR": str(base), "SLURM_NODEID": "0"}
    killed = make_scratch(record(deep), "slurm-7.0", env)
    (killed / "torchelastic_x").mkdir()
    sibling = make_scratch(record(deep), "slurm-8.0", {**env, "SLURM_NODEID": "1"})
    theirs = make_scratch(record(other_root), "slurm-5.0", env)
    unknown = base / "hpc-grpo-grpo-tiny-0001-slurm-3.0.0"
    unknown.mkdir()
    current = make_scratch(record(deep), "slurm-8.0", env)
    assert current == base / "hpc-grpo-grpo-tiny-0001-slurm-8.0.0"
    assert (current / OWNER).read_text() == deep
    assert not killed.exists()
    assert sibling.exists() and theirs.exists() and unknown.exists()
    assert str(current) == node.child_env(env, "slurm-8.0", record(deep))["TMPDIR"]


def test_inside_the_run_directory_too() -> None:
    import shutil
    import tempfile

    from hpc_grpo.runtime.node.scratch import make_scratch

    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))  # room for the sockets: inside
    try:
        run_dir = str(short / "r")
        old = make_scratch(record(run_dir), "local-1-a", {})
        new = make_scratch(record(run_dir), "local-2-b", {})
        assert new.parent == old.parent == short / "r" / "tmp"
        assert not old.exists() and new.exists()
    finally:
        shutil.rmtree(short)


def test_in_a_shared_temp_dir_a_link_or_another_users_folder_is_never_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone can make a folder named like the run's scratch in /tmp and write an OWNER file
    naming the run: the next attempt must not follow a link to it, nor remove another account's."""
    import os

    from hpc_grpo.runtime.node import scratch as scratch_module
    from hpc_grpo.runtime.node.scratch import OWNER, make_scratch

    deep = str(tmp_path / ("x" * 70) / "grpo-tiny-0001")
    base, target = tmp_path / "node-tmp", tmp_path / "precious"
    base.mkdir()
    target.mkdir()
    (target / OWNER).write_text(deep)
    (target / "data").write_text("keep")
    env = {"TMPDIR": str(base), "SLURM_NODEID": "0"}
    (base / "hpc-grpo-grpo-tiny-0001-slurm-4.0").symlink_to(target)
    forged = base / "hpc-grpo-grpo-tiny-0001-slurm-5.0"
    forged.mkdir()
    (forged / OWNER).write_text(deep)
    real_uid = os.getuid()
    monkeypatch.setattr(scratch_module.os, "getuid", lambda: real_uid + 1)  # forged: not ours
    with pytest.raises(OSError):  # its own new folder is not "ours" either under this uid
        make_scratch(record(deep), "slurm-9.0", env)
    assert (target / "data").read_text() == "keep" and forged.exists()
    monkeypatch.setattr(scratch_module.os, "getuid", lambda: real_uid)
    make_scratch(record(deep), "slurm-10.0", env)  # ours now: removed; the link still not
    assert not forged.exists() and (target / "data").read_text() == "keep"


def test_the_attempts_own_folder_in_a_shared_temp_dir_is_private_or_refused(
        tmp_path: Path) -> None:
    """Its name is predictable (run, job, node): one planted there before the attempt (a link,
    or a folder others may write) would hold the ranks' sockets. Made 0700, or refused."""
    from hpc_grpo.runtime.node.scratch import make_scratch

    deep = str(tmp_path / ("x" * 70) / "grpo-tiny-0001")
    base = tmp_path / "node-tmp"
    base.mkdir()
    env = {"TMPDIR": str(base), "SLURM_NODEID": "0"}
    made = make_scratch(record(deep), "slurm-1.0", env)
    assert made.stat().st_mode & 0o777 == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (base / "hpc-grpo-grpo-tiny-0001-slurm-2.0.0").symlink_to(elsewhere)
    with pytest.raises(OSError, match="not this user's private folder"):
        make_scratch(record(deep), "slurm-2.0", env)
    shared = base / "hpc-grpo-grpo-tiny-0001-slurm-3.0.0"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(OSError, match="not this user's private folder"):
        make_scratch(record(deep), "slurm-3.0", env)
