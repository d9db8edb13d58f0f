"""hpc_grpo.scheduler.slurm without a cluster: the pure parsers of slurm_records, and argv checked
against fake Slurm binaries."""

from __future__ import annotations

import functools
import pickle
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.scheduler import slurm, slurm_records
from hpc_grpo.scheduler.slurm_records import JobState
from tests.paths import REPO
from tests.unit.slurmfake import FakeSlurm, install


def query_states(job_ids: list[str]) -> dict[str, JobState]:
    """Each job's state by id alone from one sacct and one squeue call, through the records the
    launcher reads (tracking goes through ``slurm_view`` instead, which also checks identity);
    raises when neither command answers."""
    ids = list(dict.fromkeys(str(j) for j in job_ids))
    records = slurm.query_records(ids)
    if records.unreachable is not None:
        raise records.unreachable from records.squeue_error
    states: dict[str, JobState] = {}
    for job_id in ids:
        if not slurm_records.JOB_ID.fullmatch(job_id):
            states[job_id] = slurm_records.unknown(job_id, "not a Slurm job id")
            continue
        acct = records.acct.get(job_id)
        live = records.queue.get(job_id)
        why = f"sacct failed: {records.sacct_error.message}" if records.sacct_error else ""
        states[job_id] = slurm_records.combine(
            job_id, slurm_records.fold_sacct(acct) if acct else None,
            live.state if live else None, why)
    return states


def submit(**kwargs: Any) -> str:
    return slurm.submit_job(**kwargs).job_id


FINISHED = {
    "TIMEOUT",
    "NODE_FAIL",
    "CANCELLED",
    "FAILED",
    "COMPLETED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> FakeSlurm:
    return install(tmp_path, monkeypatch, names)


# --- states -----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(slurm_records.STATE_MEANINGS))
def test_finished_flag_per_state(state: str) -> None:
    finished, meaning = slurm_records.STATE_MEANINGS[state]
    assert finished == (state in FINISHED)
    assert meaning and "\n" not in meaning


def test_state_set_is_the_documented_one() -> None:
    assert set(slurm_records.STATE_MEANINGS) == FINISHED | {
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "PREEMPTED",
        "COMPLETING",
        "SUSPENDED",
        "UNKNOWN",
    }
    meanings = slurm_records.STATE_MEANINGS
    assert not meanings["PREEMPTED"][0] and not meanings["REQUEUED"][0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("CANCELLED by 0", "CANCELLED"),
        ("CANCELLED by 1000", "CANCELLED"),
        ("CANCELLED+", "CANCELLED"),
        ("RUNNING+", "RUNNING"),
        (" completed ", "COMPLETED"),
        ("REQUEUE_HOLD", "REQUEUED"),
        ("SPECIAL_EXIT", "REQUEUED"),
        ("CONFIGURING", "RUNNING"),
        ("STOPPED", "SUSPENDED"),
        ("PREEMPTED", "PREEMPTED"),
        ("NODE_FAIL", "NODE_FAIL"),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("PD", "UNKNOWN"),
        ("REVOKED", "CANCELLED"),
        ("BOOT_FAIL", "BOOT_FAIL"),
        ("DEADLINE", "DEADLINE"),
        ("", "UNKNOWN"),
        ("SOMETHING_NEW", "UNKNOWN"),
    ],
)
def test_normalise_state(raw: str, expected: str) -> None:
    assert slurm_records.normalise_state(raw) == expected


# --- parsers ----------------------------------------------------------------------------------

SACCT = textwrap.dedent("""\
    101|COMPLETED|node[1-2]|00:05:12|0:0|None|2025-11-21T10:00:00
    101.batch|COMPLETED|node1|00:05:12|0:0||2025-11-21T10:00:00
    102|CANCELLED by 0|node1|00:00:40|0:15|None|2025-11-21T10:01:00
    103|RUNNING|node[3-4]|00:00:30|0:0|None|2025-11-21T10:07:00
    103|REQUEUED|node[1-2]|00:02:00|0:0|None|2025-11-21T10:02:00
    103|PREEMPTED|node[1-2]|00:01:00|0:0|None|2025-11-21T10:05:00
    104|PENDING|None assigned|00:00:00|0:0|Priority|2025-11-21T10:08:00
    105|TIMEOUT|node1|00:10:00|0:0|None|2025-11-21T10:09:00
    106|NODE_FAIL|node2|00:03:00|1:0|None|2025-11-21T10:10:00
    107|FAILED|node1|00:00:03|1:0|None|2025-11-21T10:11:00
    108|OUT_OF_MEMORY|node1|00:00:09|0:125|None|2025-11-21T10:12:00
    109|REQUEUED|node1|00:04:00|0:0|None|2025-11-21T10:13:00
    109|PENDING|None assigned|00:00:00|0:0|BeginTime|2025-11-21T10:17:00
    110|COMPLETED|node1|00:01:00|0:0|None|2024-01-01T00:00:00
    110|RUNNING|node2|00:00:05|0:0|None|2025-11-21T10:20:00

    """)


def _sacct_states(text: str) -> dict[str, slurm_records.JobState]:
    """One state per job id from sacct's records, as tracking folds them."""
    return {job: slurm_records.fold_sacct(recs)
            for job, recs in slurm_records.parse_sacct_records(text).items()}


def _squeue_states(text: str) -> dict[str, slurm_records.JobState]:
    return {job: rec.state for job, rec in slurm_records.parse_squeue_records(text).items()}


def test_parse_sacct() -> None:
    got = _sacct_states(SACCT)
    assert sorted(got) == [str(i) for i in range(101, 111)]  # no "101.batch"
    assert got["101"] == slurm_records.JobState(
        "101",
        "COMPLETED",
        True,
        slurm_records.STATE_MEANINGS["COMPLETED"][1],
        "node[1-2]",
        "00:05:12",
        "0:0",
        0,
        "",
    )
    assert (got["102"].state, got["102"].finished, got["102"].exit_code) == (
        "CANCELLED",
        True,
        "0:15",
    )
    # requeued twice, records out of order: the newest (by Submit) wins, older ones count
    assert (got["103"].state, got["103"].nodes, got["103"].restarts) == ("RUNNING", "node[3-4]", 2)
    assert (got["104"].nodes, got["104"].reason, got["104"].finished) == ("", "Priority", False)
    assert [got[j].state for j in ("105", "106", "107", "108")] == [
        "TIMEOUT",
        "NODE_FAIL",
        "FAILED",
        "OUT_OF_MEMORY",
    ]
    assert all(got[j].finished for j in ("105", "106", "107", "108"))
    assert (got["109"].state, got["109"].restarts, got["109"].reason) == ("PENDING", 1, "BeginTime")
    # a reused job id (fresh cluster): the old COMPLETED job is not a restart
    assert (got["110"].state, got["110"].restarts) == ("RUNNING", 0)


def test_parse_sacct_preempted_and_empty() -> None:
    got = _sacct_states("7|PREEMPTED|n1|00:00:10|0:0|None|2025-01-01T00:00:00\n")
    assert (got["7"].state, got["7"].finished) == ("PREEMPTED", False)
    assert _sacct_states("") == {} and _sacct_states("garbage\n") == {}


def test_parse_squeue() -> None:
    text = textwrap.dedent("""\
        201|RUNNING|node[1-2]|1:23|None
        202|PENDING||0:00|Resources
        203|COMPLETING|node1|5:00|NonZeroExitCode
        204|PREEMPTED|node2|2:00|None
        205|REQUEUED|node1|0:10|None
        206|CONFIGURING|node3|0:01|None
        """)
    got = _squeue_states(text)
    assert (got["201"].state, got["201"].nodes, got["201"].elapsed, got["201"].reason) == (
        "RUNNING",
        "node[1-2]",
        "1:23",
        "",
    )
    assert (got["202"].state, got["202"].nodes, got["202"].reason) == ("PENDING", "", "Resources")
    assert [got[j].state for j in ("203", "204", "205", "206")] == [
        "COMPLETING",
        "PREEMPTED",
        "REQUEUED",
        "RUNNING",
    ]
    assert not any(s.finished for s in got.values())
    assert all(s.exit_code == "" and s.restarts == 0 for s in got.values())


# --- query_states -----------------------------------------------------------------------------


def test_query_states_one_call_each_for_1000_jobs(fake: FakeSlurm) -> None:
    ids = [str(1000 + i) for i in range(1000)]
    fake.answer("sacct", "1000|COMPLETED|n1|00:01:00|0:0|None|2025-01-01T00:00:00\n")
    fake.answer("squeue", "1001|RUNNING|n2|0:30|None\n")
    got = query_states(ids)
    assert list(got) == ids
    sacct, squeue = fake.calls("sacct"), fake.calls("squeue")
    assert len(sacct) == 1 and len(squeue) == 1 and len(fake.calls()) == 2
    assert f"--jobs={','.join(ids)}" in sacct[0]["argv"]
    assert f"--jobs={','.join(ids)}" in squeue[0]["argv"]
    for flag in ("--parsable2", "--noheader", "--allocations", "--duplicates"):
        assert flag in sacct[0]["argv"]
    assert (got["1000"].state, got["1001"].state, got["1999"].state) == (
        "COMPLETED",
        "RUNNING",
        "UNKNOWN",
    )
    assert got["1999"].finished is False


def test_query_states_merges_sacct_and_squeue(fake: FakeSlurm) -> None:
    fake.answer(
        "sacct",
        textwrap.dedent("""\
        301|PENDING|None assigned|00:00:00|0:0|None|2025-01-01T00:00:00
        302|COMPLETED|n1|00:01:00|0:0|None|2025-01-01T00:00:00
        304|RUNNING|n1|00:05:00|0:0|None|2025-01-01T00:00:00
        305|REQUEUED|n1|00:05:00|0:0|None|2025-01-01T00:00:00
        305|NODE_FAIL|n2|00:01:00|1:0|None|2025-01-01T00:10:00
        307|FAILED|n1|00:00:02|1:0|None|2025-01-01T00:00:00
        """),
    )
    fake.answer(
        "squeue",
        textwrap.dedent("""\
        301|RUNNING|n[1-2]|0:04|None
        302|COMPLETED|n1|1:00|None
        303|PENDING||0:00|Priority
        304|COMPLETING|n1|5:01|None
        305|PENDING||0:00|BeginTime
        307|CANCELLED|n1|0:02|None
        """),
    )
    got = query_states(["301", "302", "303", "304", "305", "306", "307"])
    assert (got["301"].state, got["301"].nodes) == ("RUNNING", "n[1-2]")  # squeue is fresher
    assert got["302"].state == "COMPLETED" and got["302"].elapsed == "00:01:00"  # sacct's record
    assert (got["303"].state, got["303"].reason) == ("PENDING", "Priority")  # sacct lags
    assert (got["304"].state, got["304"].finished) == ("COMPLETING", False)
    assert (got["305"].state, got["305"].finished, got["305"].restarts) == ("PENDING", False, 1)
    assert (got["306"].state, got["306"].finished) == ("UNKNOWN", False)
    assert (got["307"].state, got["307"].exit_code) == ("FAILED", "1:0")  # both over: sacct


def test_query_states_empty_makes_no_call(fake: FakeSlurm) -> None:
    assert query_states([]) == {}
    assert fake.calls() == []


def test_query_states_squeue_invalid_id_is_not_an_error(fake: FakeSlurm) -> None:
    fake.answer("sacct", "9|COMPLETED|n1|00:01:00|0:0|None|2025-01-01T00:00:00\n")
    fake.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert query_states(["9"])["9"].state == "COMPLETED"


def test_query_states_without_accounting(fake: FakeSlurm) -> None:
    fake.answer("sacct", err="sacct: error: Slurm accounting storage is disabled\n", rc=1)
    fake.answer("squeue", "5|RUNNING|n1|0:10|None\n")
    got = query_states(["5", "6"])
    assert got["5"].state == "RUNNING"
    assert got["6"].state == "UNKNOWN" and "accounting storage is disabled" in got["6"].reason
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(UserError, match="accounting storage is disabled"):
        query_states(["5"])


def test_job_ids_are_checked_before_any_call(fake: FakeSlurm) -> None:
    for bad in ("--all", "12;rm", "", "12 13"):
        assert query_states([bad])[bad].reason == "not a Slurm job id"
        with pytest.raises(UserError, match="not a Slurm job id"):
            slurm.cancel(bad)
    assert fake.calls() == []
    fake.answer("squeue", "12|RUNNING|n1|0:10|None\n")
    got = query_states(["12", "--all"])  # a bad record does not break the others
    assert (got["12"].state, got["--all"].state) == ("RUNNING", "UNKNOWN")
    assert "--jobs=12" in fake.calls("squeue")[0]["argv"]


# --- submit -----------------------------------------------------------------------------------


def _script(folder: Path, python: str = "/opt/venv/bin/python") -> str:
    return textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=2
        #SBATCH --ntasks-per-node=1
        #SBATCH --output={folder}/%j_0_log.out
        #SBATCH --signal=USR2@120
        # a comment the templates keep: 'quotes' and $VARS stay verbatim
        export SUBMITIT_EXECUTOR=slurm
        srun --unbuffered --output {folder}/%j_%t_log.out {slurm.submitit_command(python, folder)}
        """)


def test_submit_gives_sbatch_the_exact_script(fake: FakeSlurm, tmp_path: Path) -> None:
    folder = tmp_path / "run" / "submitit"
    script = _script(folder)
    job_id = submit(
        script_text=script,
        folder=folder,
        task=functools.partial(print, "hi"),
        nodes=2,
        timeout_min=30,
        max_requeues=5,
        python="/opt/venv/bin/python",
    )
    assert job_id == "4242"
    (call,) = fake.calls("sbatch")
    assert call["script"] == script
    assert (folder / "4242_submission.sh").read_text() == script
    with (folder / "4242_submitted.pkl").open("rb") as f:
        delayed = pickle.load(f)
    assert (delayed._timeout_min, delayed._timeout_countdown) == (30, 5)
    assert delayed.function.args == ("hi",)


def test_submit_refuses_a_script_without_the_submitit_line(fake: FakeSlurm, tmp_path: Path) -> None:
    folder = tmp_path / "submitit"
    script = _script(folder, python="python3")  # rendered for another interpreter
    with pytest.raises(RuntimeError, match="internal error"):
        submit(
            script_text=script,
            folder=folder,
            task=functools.partial(print),
            nodes=2,
            timeout_min=30,
            max_requeues=3,
            python="/opt/venv/bin/python",
        )
    no_export = _script(folder).replace("export SUBMITIT_EXECUTOR=slurm\n", "")
    with pytest.raises(RuntimeError, match="SUBMITIT_EXECUTOR"):
        submit(
            script_text=no_export,
            folder=folder,
            task=functools.partial(print),
            nodes=2,
            timeout_min=30,
            max_requeues=3,
            python="/opt/venv/bin/python",
        )
    assert fake.calls("sbatch") == []
    assert not list(folder.glob("*.pkl"))


def test_submit_rejected_by_sbatch(
    fake: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "submitit"
    fake.answer(
        "sbatch",
        err="sbatch: error: Batch job submission failed: Invalid partition name specified\n",
        rc=1,
    )
    with pytest.raises(UserError) as info:
        submit(
            script_text=_script(folder),
            folder=folder,
            task=functools.partial(print),
            nodes=2,
            timeout_min=30,
            max_requeues=3,
            python="/opt/venv/bin/python",
        )
    err = info.value
    assert "Invalid partition name specified" in err.message and "\n" not in err.one_line()
    assert err.message.startswith("sbatch rejected the job: ") and err.hint
    assert capsys.readouterr().err == ""  # reported once, by the caller, not by submitit


def test_submit_without_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(tmp_path, monkeypatch, ("sbatch",))
    monkeypatch.setenv("PATH", str(fake.bin))  # sbatch but no srun
    with pytest.raises(UserError, match="srun not found"):
        submit(
            script_text="",
            folder=tmp_path / "s",
            task=functools.partial(print),
            nodes=1,
            timeout_min=5,
            max_requeues=0,
            python="python3",
        )


# --- other commands ---------------------------------------------------------------------------


def test_control_commands_argv(fake: FakeSlurm) -> None:
    slurm.cancel("11")
    slurm.signal_job("12", "USR2")
    slurm.signal_job("13", "SIGTERM", scope="full")
    slurm.signal_job("14", "USR1", scope="batch")
    slurm.requeue("15")
    assert [c["argv"] for c in fake.calls()] == [
        ["11"],
        ["--signal=USR2", "12"],
        ["--signal=SIGTERM", "--full", "13"],
        ["--signal=USR1", "--batch", "14"],
        ["requeue", "15"],
    ]
    with pytest.raises(UserError, match="not a signal"):
        slurm.signal_job("12", "USR2 --all")


def test_cancel_failure_is_one_line(fake: FakeSlurm) -> None:
    fake.answer(
        "scancel",
        err="scancel: error: Kill job error on job id 11: Invalid job id "
        "specified\nscancel: error: again\nscancel: error: again\n",
        rc=1,
    )
    with pytest.raises(UserError) as info:
        slurm.cancel("11")
    assert info.value.message == (
        "scancel failed: scancel: error: Kill job error on job id 11: "
        "Invalid job id specified; scancel: error: again"
    )
    assert "ran: scancel 11" in info.value.hint


def test_partition_node_count(fake: FakeSlurm) -> None:
    fake.answer("sinfo", "node1\nnode2\nnode2\nnode3\n")
    assert slurm.partition_node_count("debug") == 3
    assert fake.calls("sinfo")[-1]["argv"] == [
        "--noheader",
        "--Node",
        "--partition=debug",
        "--format=%N",
    ]
    fake.answer("sinfo", err="sinfo: fatal: Could not establish a configuration source\n", rc=1)
    assert slurm.partition_node_count("debug") is None


def test_run_slurm_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="Slurm command no-such-slurm-binary not found") as info:
        slurm.run_slurm(["no-such-slurm-binary", "-h"])
    assert "login node" in info.value.hint
    with pytest.raises(UserError, match="gave no answer within 0.2 s"):
        slurm.run_slurm(["sleep", "5"], timeout=0.2)
    assert slurm.run_slurm(["sh", "-c", "echo $SLURM_TIME_FORMAT"]) == "standard\n"


SLURM_BINARIES = {"sbatch", "squeue", "sacct", "scontrol", "scancel", "srun", "sinfo", "salloc"}


def _slurm_argvs(path: Path) -> list[str]:
    """Argument lists in `path` whose first item is a Slurm binary (a command about to run)."""
    import ast

    return [f"{path.name}:{n.lineno} {n.elts[0].value}" for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.List) and n.elts and isinstance(n.elts[0], ast.Constant)
            and n.elts[0].value in SLURM_BINARIES]


def test_only_slurm_py_runs_slurm_binaries_and_the_parsers_stay_pure() -> None:
    """The launcher's one Slurm seam (the runtime's node task requeues itself with scontrol: it
    may not import the launcher); slurm_records only reads text."""
    package = REPO / "hpc_grpo"
    launcher = [p for p in package.rglob("*.py") if "runtime" not in p.relative_to(package).parts]
    assert len(_slurm_argvs(package / "scheduler" / "slurm.py")) >= 8  # the scan sees commands
    elsewhere = [a for p in launcher if p.name != "slurm.py" for a in _slurm_argvs(p)]
    assert elsewhere == []
    text = (package / "scheduler" / "slurm_records.py").read_text()
    assert not re.search(r"^(import|from) (os|subprocess|shutil|time)\b", text, re.MULTILINE)
