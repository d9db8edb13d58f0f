"""The run index: runs told apart by directory, names that fit several runs refused with the list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpc_grpo.config import names
from hpc_grpo.errors import UserError
from hpc_grpo.runs import registry
from tests.unit.slurmfake import make_run


def test_the_same_id_under_two_output_roots_stays_two_runs(tmp_path: Path) -> None:
    first = make_run(tmp_path / "root-a", "grpo-tiny-0001", phase="done", step=10)
    second = make_run(tmp_path / "root-b", "grpo-tiny-0001", phase="training", step=3)
    assert [(r.run_id, r.run_dir) for r in registry.indexed_runs()] == [
        ("grpo-tiny-0001", first), ("grpo-tiny-0001", second)]
    for name in ("grpo-tiny-0001", "grpo-tiny"):  # by id, and by a prefix that fits both
        with pytest.raises(UserError) as info:
            registry.find_run(name)
        line = info.value.one_line()
        assert "\n" not in line and f"'{name}' matches 2 runs" in line
        assert str(first) in line and str(second) in line
        assert info.value.field == "run" and "directory" in info.value.hint
    assert registry.find_run(str(first)) == first
    assert registry.find_run(str(second)) == second


def test_a_run_registered_twice_is_listed_once(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "grpo-tiny-0001")
    other = make_run(tmp_path / "runs", "grpo-tiny-0002")
    registry.register("grpo-tiny-0001", Path(f"{run}/"))
    assert [r.run_dir for r in registry.indexed_runs()] == [other, run]  # newest registration last
    assert registry.find_run("grpo-tiny-0001") == run


def test_unreadable_index_lines_and_deleted_runs_are_skipped(tmp_path: Path) -> None:
    kept = make_run(tmp_path / "runs", "kept-0001")
    gone = make_run(tmp_path / "runs", "gone-0001")
    shutil.rmtree(gone)
    broken = make_run(tmp_path / "runs", "broken-0001")
    (broken / "run.json").unlink()  # still listed: status says what is wrong with it
    with registry.index_path().open("a") as index:
        index.write('not json\n[1, 2]\n{"run_id": "x"}\n{"run_dir": 5}\n\xff\n')
        index.write(json.dumps({"run_dir": str(kept)}) + "\n")  # id from the folder name
    assert [(r.run_id, r.run_dir) for r in registry.indexed_runs()] == [
        ("broken-0001", broken), ("kept-0001", kept)]
    assert registry.find_run("broken-0001") == broken


def test_names_that_fit_one_run_or_none(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "grpo-tiny-0001")
    make_run(tmp_path / "runs", "grpo-tiny-0010")
    make_run(tmp_path / "runs", "check-0001")
    assert registry.find_run("check").name == "check-0001"  # a unique prefix
    assert registry.find_run("grpo-tiny-0001").name == "grpo-tiny-0001"  # exact beats prefix
    with pytest.raises(UserError, match="'grpo-tiny-00' matches 2 runs"):
        registry.find_run("grpo-tiny-00")
    with pytest.raises(UserError, match="no run 'grpo-tiny-0002'") as info:
        registry.find_run("grpo-tiny-0002")
    assert "did you mean" in info.value.hint


def test_a_damaged_newer_run_does_not_hide_what_an_older_one_measured(tmp_path: Path) -> None:
    """A run of the shape whose state.json and metrics.jsonl are damaged measures nothing: the
    older run of the shape still gives the site's measurement (steady step, slowest, save)."""
    good = make_run(tmp_path / "a", "grpo-tiny-0001")
    (good / "state.json").write_text(json.dumps({"checkpoint_seconds": 4.0}))
    (good / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "step_time": t}) + "\n"
                                                for s, t in ((1, 6.0), (2, 2.0), (3, 2.5))))
    bad = make_run(tmp_path / "b", "grpo-tiny-0001")
    (bad / "state.json").write_text(json.dumps({"checkpoint_seconds": "slow"}))
    (bad / "metrics.jsonl").write_text('{"step": 1, "step_time"\n[2, 3]\nnot json\n')
    [found] = registry.site_measurements("sandbox")
    assert (found.run_id, found.checkpoint_s, found.steady.seconds, found.steady.slowest) == (
        "grpo-tiny-0001", 4.0, 2.25, 2.5)


def test_the_output_root_is_a_directory_new_or_existing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site's output_root that is a file is the profile's to fix (field and hint say so); a
    new root, or one whose parents are still to be made, is fine."""
    monkeypatch.setenv("RUNS_HERE", str(tmp_path))
    assert registry.output_root(None, "$RUNS_HERE/new/runs") == tmp_path / "new" / "runs"
    (tmp_path / "taken").write_text("")
    with pytest.raises(UserError) as info:
        registry.output_root(None, "$RUNS_HERE/taken")
    assert info.value.field == "output_root" and "site profile" in info.value.hint
    assert f"{tmp_path / 'taken'} is a file, not a directory" in info.value.message


@pytest.mark.parametrize("run_id", ["a/b", "../sibling", "/abs/x", "..", ".hidden", "nl\n",
                                    "a" * (names.RUN_ID_MAX + 1)])
def test_create_run_dir_refuses_a_run_id_that_is_not_one_directory_name(
        tmp_path: Path, run_id: str) -> None:
    """``root / run_id`` must be a new directory directly under the root: a path in the id put
    it elsewhere and made its parents before failing (FileNotFoundError), a long one failed with
    'File name too long'. Refused before anything is made."""
    with pytest.raises(UserError) as caught, \
            registry.create_run_dir(tmp_path / "runs", run_id, {"run.json": "{}"}):
        pass
    assert caught.value.field == "run_id" and "\n" not in caught.value.one_line()
    assert list(tmp_path.iterdir()) == []


def test_the_longest_run_id_and_its_hidden_twin_fit_a_file_name(tmp_path: Path) -> None:
    """RUN_ID_MAX leaves room for create_run_dir's temporary name (.<id>.<8 random>)."""
    run_id = "r" * names.RUN_ID_MAX
    assert len(run_id) + names.TEMP_NAME_EXTRA <= names.FILE_NAME_MAX
    with registry.create_run_dir(tmp_path, run_id, {"run.json": "{}"}) as run_dir:
        assert (run_dir / "run.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == [run_id]
