"""The status table fits 80 columns: restarts and notes go under it, the nodes column stays."""

from __future__ import annotations

import pytest

from hpc_grpo.runs import track, views
from tests.unit.runs.views_helpers import _row


def _rows() -> list[track.RunStatus]:
    """Built when the test runs: checkpoint ages count from now."""
    return [
        _row(),
        _row("grpo-tiny-0002", state="PREEMPTED", meaning="preempted: Slurm requeues it"),
        _row("grpo-tiny-0003", state="COMPLETED", source="run directory",
             note="job 2 is now another job ('sleep', submitted 2026-01-01T11:00:00): state "
                  "from the run directory"),
        _row("grpo-tiny-0004", state="OUT_OF_MEMORY"),
    ]


@pytest.mark.parametrize("columns", ["80", None])
def test_usual_rows_fit_80_columns_whole(
    columns: str | None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: wide, but the table stays narrow
    rows = _rows()
    views.status_table(rows)
    out = capsys.readouterr().out
    table = out.splitlines()[: 1 + len(rows)]  # header and one line per run, then the notes
    assert table[0].split() == ["run", "job", "state", "step", "reward", "tok/s", "ckpt", "rq",
                                "nodes"]
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    for row, line in zip(rows, table[1:], strict=True):
        assert line.startswith(row.run_id) and line.rstrip().endswith(row.nodes)
        assert "1000 59m" in line and " 2 " in line
    assert "COMPLETED*" in table[3] and " OOM " in table[4]
    notes = out.splitlines()[len(table):]
    assert "grpo-tiny-0001: requeues: preempted -0, node failure -3" in notes
    assert any(n.startswith("grpo-tiny-0002: PREEMPTED (not done)") for n in notes)
    assert any("grpo-tiny-0003: job 2 is now another job" in n for n in notes)
    assert notes[-1].startswith("*: state from the run directory")


def test_a_long_run_id_folds_but_the_nodes_column_stays(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    views.status_table([_row("grpo-qwen2.5-math-72b-instruct-0001", restarts=(), requeues=12,
                             job_id="12345678", nodes="gpu-h100-[001-004]")])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[1].rstrip().endswith("gpu-h100-[001-004]") and " 12345678 " in lines[1]
    assert "".join(line.split(" ")[0] for line in lines[1:]) == "grpo-qwen2.5-math-72b-instruct-0001"


def test_no_runs(capsys: pytest.CaptureFixture[str]) -> None:
    views.status_table([])
    assert capsys.readouterr().out.startswith("no runs yet")


def test_every_column_survives_the_widest_values_at_80(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 9-digit job id, COMPLETING, a million steps, big rewards and rates, a node list of
    another cluster: rich used to drop the run column and cut the node list; now they fold."""
    monkeypatch.setenv("COLUMNS", "80")
    wide = _row("grpo-qwen2.5-math-72b-0001", job_id="123456789", state="COMPLETING",
                step=123456, max_steps=1000000, reward=-1234.567, tokens_per_s=123456.0,
                checkpoint_step=123000, requeues=12, nodes="cn[001-004,010]", restarts=())
    views.status_table([wide, _row("g-0001", nodes="cn[001-004,010]")])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0].split() == ["run", "job", "state", "step", "reward", "tok/s", "ckpt", "rq",
                                "nodes"]
    nodes_at = lines[0].index("nodes")
    body = lines[1:lines.index(next(x for x in lines if x.startswith("g-0001")))]
    assert "".join(x[:nodes_at].split(" ")[0] for x in body) == wide.run_id
    assert "".join(x[nodes_at:].strip() for x in body) == wide.nodes
    assert "123k/1.0M" in body[0] and "-1234.6" in body[0] and " 123k " in body[0]


def test_runs_sharing_an_id_are_told_apart_by_their_directories(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """#27: the same run id in two output roots showed as two identical rows."""
    monkeypatch.setenv("COLUMNS", "120")
    views.status_table([_row("train-0001", run_dir="/scratch/a/train-0001"),
                        _row("train-0001", run_dir="/home/u/runs/train-0001"),
                        _row("train-0002")])
    out = capsys.readouterr().out
    assert "/scratch/a/train-0001" in out and "/home/u/runs/train-0001" in out
    assert "train-0002" in out and "/r/train-0002" not in out  # a unique id stays short
