"""Paths that are not what the option expects (#58, "what must be shown"): a FIFO, a huge file,
an empty one, a folder where a file goes. Each is one line, exit 2, nothing written, or (status)
a line naming the problem; none hangs or shows a traceback. docs/bad-inputs.md lists every case
probed by hand and its outcome."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from tests.unit.cli.cli_errors_helpers import assert_refused
from tests.unit.cli.cli_errors_helpers import fake_slurm as fake_slurm  # noqa: F401, F811 (a fixture)
from tests.unit.slurmfake import FakeSlurm


@pytest.fixture
def fifo_never_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a FIFO for reading waits for a writer forever: the command hung with nothing
    printed. Here an open of one fails the test instead of hanging it."""
    real = Path.open

    def guarded(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.is_fifo():
            raise AssertionError(f"opened the FIFO {self}: the command would hang here")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded)


def submit(tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    root = tmp_path / "runs"
    result = CliRunner().invoke(
        main, ["submit", "--output-root", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stderr, root


@pytest.mark.parametrize(("option", "name", "field"), [
    ("--recipe", "r.yaml", "recipe"), ("--site", "p.yaml", "site profile"),
    ("--dataset", "d.jsonl", "dataset"), ("--dataset", "d.csv", "dataset"),
    ("--dataset", "d.parquet", "dataset")])
def test_a_fifo_given_as_a_file_is_one_line_unopened(
        tmp_path: Path, fake_slurm: FakeSlurm, fifo_never_opened: None, option: str, name: str,
        field: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    site = [] if option == "--site" else ["--site", "sandbox"]
    code, err, root = submit(tmp_path, *site, "--model", "builtin:tiny", option, str(fifo))
    assert_refused(code, err, root, fake_slurm, field, "is a named pipe (FIFO), not a", "hint")


def test_status_names_a_fifo_in_place_of_run_json(tmp_path: Path, fifo_never_opened: None) -> None:
    run_dir = tmp_path / "grpo-x-0001"
    run_dir.mkdir()
    os.mkfifo(run_dir / "run.json")
    result = CliRunner().invoke(main, ["status", str(run_dir)], catch_exceptions=False)
    assert "run.json is a named pipe (FIFO), not a file" in result.output


def test_a_binary_file_named_csv_is_one_line(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """50 MB of NUL bytes as data.csv: csv's 'field larger than field limit' was a traceback."""
    data = tmp_path / "data.csv"
    with data.open("wb") as handle:
        handle.truncate(50 << 20)  # sparse: cheap
    code, err, root = submit(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                             "--dataset", str(data))
    assert_refused(code, err, root, fake_slurm, "dataset", "is not a CSV file", "hint")


@pytest.mark.parametrize("under", ["", "sub"])
@pytest.mark.parametrize("command", [["status"], ["plan", "--model", "builtin:tiny"]])
def test_an_hpc_grpo_home_that_is_a_file_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, under: str, command: list[str]) -> None:
    """Every command reads or appends HOME/runs.jsonl: a NotADirectoryError traceback."""
    blocker = tmp_path / "afile"
    blocker.write_text("mine\n")
    monkeypatch.setenv("HPC_GRPO_HOME", str(blocker / under if under else blocker))
    result = CliRunner().invoke(main, command, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: HPC_GRPO_HOME: {blocker / under if under else blocker} "
        f"{'is under the file ' + str(blocker) if under else 'is a file'}, not a directory "
        "(hint: set HPC_GRPO_HOME to a directory, new or existing, or unset it)"]
    assert blocker.read_text() == "mine\n"


def _one_line(args: list[str], *words: str) -> None:
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "(hint: " in lines[0], \
        result.stderr
    for word in words:
        assert word in lines[0]


def test_a_file_where_a_folder_goes_and_back_is_the_commands_own_line(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """click.Path's own checks answered first: three lines of usage and no hint ("Error: Invalid
    value for '--to': Directory '...' is a file."); the readers' lines say what to give."""
    from tests.unit.export import fakes

    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    folder = tmp_path / "profiles.yaml"
    folder.mkdir()
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    _one_line(["plan", "--model", "builtin:tiny", "--recipe", str(folder)], "recipe",
              "is a directory, not a YAML file")
    _one_line(["export", str(run), "--to", str(blocker), "--here"], "to", "is a file, not a folder")
    _one_line(["example-model", str(blocker)], "is a file, not a folder")
    for force in ([], ["--force"]):  # --force went on to os.replace's IsADirectoryError
        _one_line(["site", "init", "mine", "--local", "--output", str(folder), *force],
                  "output", "is a folder, not a file")
    assert blocker.read_text() == "mine\n" and list(folder.iterdir()) == []
    assert not (run / "export").exists()


def test_site_init_into_a_folder_it_cannot_write_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(root writes anywhere chmod allows, so the write is made to fail.)"""
    real = Path.write_text

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.parent == tmp_path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", denied)
    _one_line(["site", "init", "mine", "--local", "--output", str(tmp_path / "mine.yaml")],
              "output", "cannot be written: Permission denied")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("content", "words"), [
    (None, ("does not exist",)), (b"", ("has no rows",)),
    (b'{"prompt": "caf\xe9"}\n', ("not UTF-8", "save it as UTF-8"))],
    ids=["missing", "empty", "not UTF-8"])
def test_eval_checks_its_dataset_as_submit_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None,
        words: tuple[str, ...]) -> None:
    """eval --dataset went straight to the child: it failed there ("eval of step-4 failed:
    DatasetError ..." or a bare UnicodeDecodeError) after writing its temporary and cache
    folders into the run (and the output root's .datasets-cache)."""
    from hpc_grpo.export import evaluate
    from tests.unit.export import fakes

    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)

    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the eval child started on a dataset that cannot load")

    monkeypatch.setattr(evaluate.child, "run", no_child)
    data = tmp_path / "data" / "held.jsonl"
    if content is not None:
        data.parent.mkdir()
        data.write_bytes(content)
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(main, ["eval", str(run), "--dataset", str(data)],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dataset: "), result.stderr
    for word in words:
        assert word in lines[0]
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("content", ["", "# max_steps: 10\n"], ids=["empty", "only comments"])
def test_an_empty_recipe_is_refused_as_an_empty_profile_is(
        tmp_path: Path, fake_slurm: FakeSlurm, content: str) -> None:
    """It was taken as every key defaulted: submit started a run nobody described."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(content)
    code, err, root = submit(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                             "--recipe", str(recipe))
    assert_refused(code, err, root, fake_slurm, "recipe", "is empty (no keys, or only comments)",
                   "leave out --recipe")


def test_example_model_into_a_folder_it_cannot_write_blames_the_folder(tmp_path: Path) -> None:
    """/proc/sys/vm/m: the builder's FileNotFoundError came with "install the runtime extra"."""
    from hpc_grpo.errors import UserError
    from hpc_grpo.preflight import builtin_model

    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"FileNotFoundError: [Errno 2] No such file or "
                      "directory: '/proc/sys/vm/m'\" >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(UserError) as caught:
        builtin_model.example_model("tiny", tmp_path / "m", python=str(python))
    assert "FileNotFoundError" in caught.value.message
    assert caught.value.hint == f"give a folder you can write, with room for the model (not {tmp_path / 'm'})"


def test_a_file_as_the_model_is_said_to_be_a_file(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """It was "model path X does not exist", of a file that does (model.safetensors given
    instead of its folder)."""
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 16)
    code, err, root = submit(tmp_path, "--site", "sandbox", "--model", str(weights))
    assert_refused(code, err, root, fake_slurm, "model", "is a file, not a model folder",
                   "save_pretrained")


@pytest.mark.parametrize(("name", "content", "words"), [
    ("held.parquet", b"", ("is not a Parquet file (empty)",)),
    ("held.parquet", b"\0" * 4096, ("is not a Parquet file", "PAR1")),
    ("held.txt", b'{"prompt": "1 + 1"}\n', ("is not one of .csv, .json, .jsonl, .parquet",))],
    ids=["empty parquet", "not parquet", "no format"])
def test_a_dataset_file_the_ranks_cannot_load_is_told_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_slurm: FakeSlurm, name: str,
        content: bytes, words: tuple[str, ...]) -> None:
    """No stdlib Parquet reader, and no format for another suffix: the eval child said so after
    writing into the run and the shared datasets cache. Submit's probe is kept out too."""
    from hpc_grpo.export import evaluate
    from hpc_grpo.preflight import inputs
    from tests.unit.export import fakes

    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a child started on a dataset that cannot load")

    monkeypatch.setattr(evaluate.child, "run", no_child)
    monkeypatch.setattr(inputs, "probe_inputs", no_child)
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    data = tmp_path / "data" / name
    data.parent.mkdir()
    data.write_bytes(content)
    before = sorted(tmp_path.rglob("*"))
    _one_line(["eval", str(run), "--dataset", str(data)], "dataset", *words)
    assert sorted(tmp_path.rglob("*")) == before
    code, err, root = submit(tmp_path / "elsewhere", "--site", "sandbox", "--model",
                             "builtin:tiny", "--dataset", str(data))
    assert_refused(code, err, root, fake_slurm, "dataset", *words)


def test_the_path_refusals_the_probe_found_without_a_hint_have_one(
        tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """docs/bad-inputs.md: these were one line with no hint (what to give instead)."""
    from tests.unit.export import fakes

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    (tmp_path / "d.json").write_text("")
    (tmp_path / "folder.jsonl").mkdir()
    for option, value in [("--dataset", str(tmp_path / "missing.jsonl")),
                          ("--dataset", str(tmp_path / "d.json")),
                          ("--dataset", str(tmp_path / "folder.jsonl")),
                          ("--model", str(empty_dir))]:
        model = [] if option == "--model" else ["--model", "builtin:tiny"]
        _one_line(["plan", *model, option, value])
    run = fakes.run_dir(tmp_path)
    (run / "run.json").unlink()
    (run / "run.json").mkdir()
    _one_line(["export", str(run)], "is not a run directory")
