"""A local dataset file's rows checked on the login node with the standard library (#58): a
broken JSONL line was submitted with a "not checked" warning, every rank then failed with
DatasetGenerationError and no line number, and resume submitted it again."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import inputs
from tests.unit.cli.cli_errors_helpers import assert_refused
from tests.unit.cli.cli_errors_helpers import fake_slurm as fake_slurm  # noqa: F401, F811 (a fixture)
from tests.unit.slurmfake import FakeSlurm

GOOD = '{"prompt": "What is 1+1?", "solution": "2"}\n'


@pytest.fixture(autouse=True)
def probe_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case of the issue: a python without the training stack, so the probe only warns."""
    monkeypatch.setattr(inputs, "probe_inputs", lambda *a, **k: inputs.Probed(
        notes=("rewards and prompts not checked on this machine (no training stack)",)))


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "words"), [
    (GOOD + '{"prompt": "What is 2+3?", "solution": "5"\n' + GOOD,
     ("line 2 is not JSON", "Expecting ',' delimiter", '{"prompt": "What is 2+3?"')),
    (GOOD * 3 + "this is not json at all, and a long line it is" + "!" * 80 + "\n",
     ("line 4 is not JSON", "this is not json at all", "...")),
    ("", ("has no rows",)),
    ("\n  \n", ("has no rows",)),
    (GOOD + '["a list", 1]\n', ("line 2 is", "not a JSON object")),
    (GOOD + "\n" + "null\n", ("line 3 is null, not a JSON object",)),
])
def test_a_broken_jsonl_is_refused_with_the_line(tmp_path: Path, text: str,
                                                 words: tuple[str, ...]) -> None:
    path = _file(tmp_path, "math.jsonl", text)
    with pytest.raises(UserError) as caught:
        inputs.check_dataset(str(path), "prompt")
    line = caught.value.one_line()
    assert str(path) in line and caught.value.field == "dataset", line
    for word in words:
        assert word in line


@pytest.mark.parametrize("text", [
    GOOD + "\n" + GOOD,  # a blank line: datasets skips it
    '\ufeff' + GOOD,  # a byte-order mark
    GOOD + GOOD.rstrip("\n"),  # no newline at the end
    GOOD.rstrip("\n") + " " + GOOD,  # two objects on one line: datasets reads both
    '{\n  "prompt": "What is 1+1?"\n}\n' + GOOD,  # one value over several lines: read as one
])
def test_what_datasets_reads_is_not_refused(tmp_path: Path, text: str) -> None:
    path = _file(tmp_path, "math.jsonl", text)
    assert inputs.check_dataset(str(path), "prompt") == str(path.resolve())


def test_json_and_csv_and_parquet(tmp_path: Path) -> None:
    """.json is parsed whole (the decoder's line and column); .csv's header is read; .parquet
    has no stdlib reader (the probe loads it where the site's python can): its magic bytes only."""
    broken = _file(tmp_path, "m.json", '[{"prompt": "a"},\n{"prompt": "b"\n]\n')
    with pytest.raises(UserError, match="does not parse: Expecting ',' delimiter: line 3"):
        inputs.check_dataset(str(broken), "prompt")
    with pytest.raises(UserError, match="does not parse: Expecting value: line 1 column 1"):
        inputs.check_dataset(str(_file(tmp_path, "e.json", "")), "prompt")
    assert inputs.check_dataset(str(_file(tmp_path, "m.csv", "prompt,b\n1,2,3\n")), "prompt")
    # only its magic bytes are read here: PAR1 at both ends passes, a renamed file does not
    assert inputs.check_dataset(str(_file(tmp_path, "m.parquet", "PAR1 body PAR1")), "prompt")
    with pytest.raises(UserError, match="is not a Parquet file"):
        inputs.check_dataset(str(_file(tmp_path, "n.parquet", "PAR1 not parquet")), "prompt")


def test_submit_refuses_a_broken_line_in_one_line_and_writes_nothing(
        tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    data = _file(tmp_path, "math.jsonl", GOOD + '{"prompt": "2+3?" "solution": "5"}\n')
    root = tmp_path / "runs"
    result = CliRunner().invoke(main, ["submit", "--output-root", str(root), "--site", "sandbox",
                                       "--model", "builtin:tiny", "--dataset", str(data)],
                                catch_exceptions=False)
    assert_refused(result.exit_code, result.stderr, root, fake_slurm, str(data), "line 2",
                   '{"prompt": "2+3?" "solution"')


def test_resume_refuses_a_dataset_broken_since_submit(fake_slurm: FakeSlurm,
                                                      tmp_path: Path) -> None:
    data = _file(tmp_path, "math.jsonl", GOOD * 2)
    run_dir = api.submit(api.Request(site="sandbox", flags={"model": "Qwen/Qwen2.5-0.5B",
                                                           "dataset": str(data)},
                                     output_root=str(tmp_path / "runs"))).run_dir
    fake_slurm.answer("squeue", "")
    data.write_text(GOOD + "{oops\n")
    files = {p.name: p.read_text() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(UserError, match="line 2 is not JSON"):
        api.resume(str(run_dir))
    assert {p.name: p.read_text() for p in run_dir.iterdir() if p.is_file()} == files
    assert len(fake_slurm.calls("sbatch")) == 1
