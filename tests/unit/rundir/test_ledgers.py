"""The run directory's ledgers (rundir/ledgers.py): what followed training and each save; each
line written is read back as written, and an odd line never raises: a value of the wrong type
takes the field's default."""

from __future__ import annotations

import json
from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.rundir import ledgers
from hpc_grpo.rundir.ledgers import EvalResult, ExportJobLine, ExportLine, PushLine, SaveLine


def test_each_writer_is_read_back(tmp_path: Path) -> None:
    folder = tmp_path / "export" / "step-4"
    folder.mkdir(parents=True)
    export = ExportLine(path=str(folder), time=2.0, step=4, layout="full", mode="full",
                        dtype="float32", check={"max_abs_diff": 0.001}, best_key="reward_mean",
                        best_value=1.5)
    ledgers.append_export(tmp_path, export)
    assert ledgers.exports(tmp_path) == [export] and ledgers.newest_export(tmp_path) == export
    written = json.loads((tmp_path / "exports.jsonl").read_text())
    assert written["best"] == {"key": "reward_mean", "value": 1.5} and written["step"] == 4
    push = PushLine(repo_id="org/x", time=3.0, step=4, path=str(folder), url="u", commit="abc")
    ledgers.append_push(tmp_path, push)
    assert ledgers.pushes(tmp_path) == [push] and ledgers.newest_push(tmp_path) == push
    job = ExportJobLine(job_id="7", time=1.0, scheduler="slurm", script="s", log="l", step=4,
                        target=str(folder), mem_mb=2048, reason="--job")
    assert ledgers.next_export_job(tmp_path) == 1
    ledgers.append_export_job(tmp_path, job)
    assert ledgers.export_jobs(tmp_path) == [job] and ledgers.next_export_job(tmp_path) == 2


def test_odd_lines_are_read_without_raising(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    (tmp_path / "exports.jsonl").write_text(
        'not json\n[1]\n{"path": 7}\n' + json.dumps({"path": str(tmp_path / "gone"), "step": 9})
        + "\n" + json.dumps({"path": str(kept), "step": True, "mode": 3, "check": [1],
                             "best": "x"}) + "\n")
    (line,) = ledgers.exports(tmp_path)
    assert line == ExportLine(path=str(kept))  # each odd value took its field's default
    assert ledgers.furthest_export(tmp_path) is None  # no step
    (tmp_path / "pushes.jsonl").write_text('{"repo_id": 5}\n{"repo_id": "a/b", "commit": 1}\n')
    assert ledgers.pushes(tmp_path) == [PushLine(repo_id="a/b")]
    (tmp_path / "export-jobs.jsonl").write_text('{"job_id": 5}\n{"job_id": "8", "step": "4"}\n')
    assert ledgers.export_jobs(tmp_path) == [ExportJobLine(job_id="8")]
    assert ledgers.next_export_job(tmp_path) == 3  # no number is given twice


def test_the_furthest_export_and_the_newest_eval(tmp_path: Path) -> None:
    for step in (6, 2):
        (tmp_path / f"step-{step}").mkdir()
        ledgers.append_export(tmp_path, ExportLine(path=str(tmp_path / f"step-{step}"), step=step))
    assert (ledgers.furthest_export(tmp_path) or ExportLine()).step == 6
    assert (ledgers.newest_export(tmp_path) or ExportLine()).step == 2
    evals = tmp_path / "eval"
    evals.mkdir()
    (evals / "a.json").write_text(json.dumps({"time": 5, "reward": {"mean": 1, "low": 0,
                                                                    "high": 2}, "prompts": 4}))
    (evals / "b.json").write_text(json.dumps({"time": 1, "reward": {}}))
    (evals / "c.json").write_text(json.dumps({"time": 9, "reward": []}))  # no evaluation
    (evals / "d.json").write_text("{")
    newest = ledgers.newest_eval(tmp_path)
    assert newest == EvalResult(file=str(evals / "a.json"), time=5.0, reward_mean=1.0,
                                reward_low=0.0, reward_high=2.0, prompts=4)


def test_each_save_is_kept_with_the_attempt_that_made_it(tmp_path: Path) -> None:
    """saves.jsonl (#59): rank 0's writer puts state.json's attempt and the time on each line,
    ``held_s`` only where given; the reader gives them back typed, oldest first."""
    rundir.update_state(tmp_path, attempt="slurm-7.0")
    ledgers.append_save(tmp_path, step=2, seconds=4.5)
    ledgers.append_save(tmp_path, step=4, seconds=5.25, held_s=0.75)
    first, second = ledgers.saves(tmp_path)
    assert (first.step, first.seconds, first.attempt, first.held_s) == (2, 4.5, "slurm-7.0", None)
    assert (second.step, second.seconds, second.held_s) == (4, 5.25, 0.75)
    assert first.time is not None and second.time is not None and first.time <= second.time
    assert "held_s" not in json.loads((tmp_path / "saves.jsonl").read_text().splitlines()[0])
    assert ledgers.saves(tmp_path / "older") == []  # a run directory before the ledger


def test_damaged_save_lines_are_left_out_or_take_their_defaults(tmp_path: Path) -> None:
    good = {"step": 6, "seconds": 3.0, "time": 9.0, "attempt": "a"}
    (tmp_path / "saves.jsonl").write_text("\n".join([
        "not json", "[1, 2]", json.dumps({"seconds": 2.0}), json.dumps({"step": "4", "seconds": 1}),
        json.dumps({"step": 5, "seconds": -1}), json.dumps({"step": True, "seconds": 1}),
        json.dumps({"step": 5, "seconds": "2"}), json.dumps(good),
        json.dumps({"step": 8, "seconds": 2, "time": "x", "attempt": 3, "held_s": -2}),
        json.dumps({"step": 10, "seconds": 1.5, "held_s": True}),
        '{"step": 12, "seconds": 1.0, "ti']) + "\n")  # a torn last line
    assert ledgers.saves(tmp_path) == [SaveLine(6, 3.0, 9.0, "a"), SaveLine(8, 2.0),
                                       SaveLine(10, 1.5)]
