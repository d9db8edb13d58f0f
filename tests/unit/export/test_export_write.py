"""export/write.py with a stand-in for the runtime child (a script given as ``python``): the
folder appears complete, with its card, or not at all: a failed check, a child that dies, a
SIGTERM to the launcher and a killed earlier export leave nothing at the target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.export import write
from hpc_grpo.rundir import ledgers, workspace
from hpc_grpo.runs import after_training
from tests.paths import REPO
from tests.unit.export import fakes
from tests.unit.export.export_fake import FAKE


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    path = tmp_path / "fakepython"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name) if folder.exists() else []


def test_a_checked_export_is_renamed_into_place_with_its_card(tmp_path: Path, fake_python: str) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    (run / "reward_curve.png").write_bytes(b"png")
    lines: list[str] = []
    done = write.export(run, python=fake_python, announce=lines.append)
    target = run / "export" / "step-4"
    assert done.error == "" and done.plan.target == target and done.notes == ("a note",)
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "config.json",
                                                       "model.safetensors", "reward_curve.png"]
    card = (target / "README.md").read_text()
    assert "# tiny-0001, step 4" in card and "`builtin:length`" in card and "| 4 | -26.0000 |" in card
    assert "![reward curve of the run](reward_curve.png)" in card and "tolerance 0.05" in card
    assert lines and lines[0].startswith("export tiny-0001 checkpoint-4 (full layout")
    assert _leftovers(run / "export") == []
    entry = ledgers.newest_export(run)
    assert entry is not None and entry.path == str(target) and entry.check["max_abs_diff"] == 0.001
    assert after_training.export_line(entry).startswith("exported step 4 (full, float32), checked")


def test_the_export_childs_temporaries_and_caches_are_the_runs(
        tmp_path: Path, fake_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #58: the export child's TMPDIR (where torch inductor's cache went:
    /tmp/torchinductor_USER) and caches are the run's, by the ranks' rule; TMPDIR goes with it."""
    run = fakes.run_dir(tmp_path, model_load={"hf_home": "/shared/hf"})
    fakes.checkpoint(run, 4)
    for key in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "HF_DATASETS_CACHE", "HF_HOME"):
        monkeypatch.delenv(key, raising=False)
    dump = tmp_path / "child-env.json"
    monkeypatch.setenv("FAKE_ENV_OUT", str(dump))
    monkeypatch.setattr(workspace, "UNIX_SOCKET_ROOM", 1000)  # pytest's folders are deep ones
    assert write.export(run, python=fake_python).error == ""
    env = json.loads(dump.read_text())
    assert Path(env["TMPDIR"]).parent == run / "tmp" and not Path(env["TMPDIR"]).exists()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(run.parent / ".compile-cache" / "inductor")
    assert "HF_DATASETS_CACHE" not in env  # the site's hf_home has its own datasets/


@pytest.mark.parametrize(("run_mode", "files"), [(0o700, 0o600), (0o750, 0o640)])
def test_the_exported_folder_is_shared_as_the_run_is(tmp_path: Path, fake_python: str,
                                                     run_mode: int, files: int) -> None:
    """Issue #58: the weights came out 0600 and the rest 0644; now every file has the run
    directory's mode (the site's run_dir_mode) without execute bits, the folder the mode."""
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    run.chmod(run_mode)
    target = write.export(run, python=fake_python).plan.target
    assert target.stat().st_mode & 0o777 == run_mode
    assert {p.name: p.stat().st_mode & 0o777 for p in target.iterdir()} == {
        "README.md": files, "config.json": files, "model.safetensors": files}


def test_a_failed_check_leaves_nothing(tmp_path: Path, fake_python: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    monkeypatch.setenv("FAKE_EXPORT", "fail")
    done = write.export(run, python=fake_python)
    assert "above the tolerance 0.05" in done.error and "nothing was written" in done.error
    assert not (run / "export" / "step-4").exists() and _leftovers(run / "export") == []
    assert ledgers.newest_export(run) is None


def test_a_child_that_dies_half_way_leaves_nothing(tmp_path: Path, fake_python: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    monkeypatch.setenv("FAKE_EXPORT", "crash")
    with pytest.raises(UserError, match="export failed: RuntimeError: out of host memory"):
        write.export(run, python=fake_python)
    assert not (run / "export" / "step-4").exists() and _leftovers(run / "export") == []


def test_sigterm_during_the_export_leaves_nothing(tmp_path: Path, fake_python: str) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    code = ("import sys; from pathlib import Path; from hpc_grpo.export import write; "
            f"write.export(Path({str(run)!r}), python={fake_python!r})")
    env = {**os.environ, "FAKE_EXPORT": "hang", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    started = run / "export" / "child-started"
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.stderr.read() if proc.stderr else ""
    assert _leftovers(run / "export")  # the weights are being written in the hidden folder
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert not (run / "export" / "step-4").exists() and _leftovers(run / "export") == []
    assert ledgers.newest_export(run) is None


def test_a_killed_exports_hidden_folder_is_cleared_by_the_next(tmp_path: Path, fake_python: str) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = run / "export" / f".step-4.partial-{dead}"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_text("half")
    assert write.export(run, python=fake_python).error == ""
    assert not stale.exists() and (run / "export" / "step-4" / "README.md").exists()


def test_nothing_runs_for_a_refused_export(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4, complete=False)
    with pytest.raises(UserError, match="no complete checkpoint"):
        write.export(run, python="/nonexistent/python")
    assert not (run / "export").exists()


@pytest.mark.parametrize("under", ["", "exp"])
def test_a_target_that_is_or_lies_under_a_file_is_one_line(tmp_path: Path, under: str) -> None:
    """--to FILE/exp was a 34-line FileExistsError traceback from the mkdir (#58); --to FILE
    said "already exists and is not empty"."""
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    to = blocker / under if under else blocker
    with pytest.raises(UserError) as caught:
        write.export(run, to=str(to), python="/nonexistent/python")
    where = f"is under the file {blocker}" if under else "is a file"
    assert caught.value.one_line() == (f"error: to: export target {to} {where}, not a folder "
                                       "(hint: pass --to a new or empty folder)")
    assert blocker.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["notes.txt", run.parent.name]
    assert not (run / "export").exists()
