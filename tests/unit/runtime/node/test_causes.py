"""Causes of a stop, decided from what Slurm 22.05 really said (records taken on the sandbox
cluster, tests/unit/records/slurm_causes.json; docs/causes.md) and from records changed the way
another cluster would write them."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.node import causes, slurm_facts
from hpc_grpo.runtime.node.causes import (
    CANCELLED,
    NODE_FAILURE,
    PREEMPTED,
    REQUEUED,
    TASK_CRASH,
    TIME_LIMIT,
    USER_SIGNAL,
    JobFacts,
)
from tests.paths import TESTS

RECORDS = json.loads((TESTS / "unit" / "records" / "slurm_causes.json").read_text())
SIGNALLED = {c["name"]: c for c in RECORDS["signalled"]}
CRASHES = {c["name"]: c for c in RECORDS["crashes"]}


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The records hold the controller's local time (UTC there); read them in UTC anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def facts_of(case: dict[str, Any], job_line: str | None = None) -> JobFacts:
    record = causes.parse_record(job_line or case["scontrol_show_job"])
    env = case["env"]
    count = int(env["SLURM_RESTART_COUNT"] or 0)
    left = slurm_facts.end_seconds_left(record.get("EndTime", ""), float(case.get("now", 0)))
    return causes.job_facts(record, count, env["SLURM_JOB_NODELIST"], left)


@pytest.mark.parametrize("name", sorted(SIGNALLED))
def test_each_recorded_signal_gets_its_cause(name: str) -> None:
    case = SIGNALLED[name]
    facts = facts_of(case)
    assert causes.stop_cause([case["signal"]], facts, case["lead_s"]) == case["cause"], facts


def test_the_recorded_causes_cover_every_signalled_kind() -> None:
    got = {c["cause"] for c in RECORDS["signalled"]} | {c["cause"] for c in RECORDS["crashes"]}
    assert got == {PREEMPTED, TIME_LIMIT, USER_SIGNAL, REQUEUED, NODE_FAILURE, TASK_CRASH, CANCELLED}


def test_seconds_left_come_from_end_time_as_squeue_counts_them() -> None:
    for case in RECORDS["signalled"]:
        state, _reason, left, _end = case["squeue_T_r_L_e"].split("|")
        facts = facts_of(case)
        if state != "RUNNING" or facts.preempted:  # squeue's %L counts the limit, not the grace
            continue
        minutes, seconds = (int(x) for x in left.split(":")[-2:])
        assert facts.seconds_left == pytest.approx(minutes * 60 + seconds, abs=2), case["name"]


def test_preemption_is_told_by_preempt_time_not_by_the_moved_end_time() -> None:
    facts = facts_of(SIGNALLED["preempted_usr2"])
    assert facts.preempted and facts.seconds_left is not None and facts.seconds_left <= 30
    assert causes.stop_cause(["SIGUSR2"], facts, 30) == PREEMPTED  # not "time limit"
    assert not facts_of(SIGNALLED["user_usr2"]).preempted


def test_a_non_preemptible_partition_has_no_preempt_time_field() -> None:
    record = causes.parse_record(SIGNALLED["time_limit_usr2"]["scontrol_show_job"])
    assert "PreemptTime" not in record and record["Partition"] == "debug"


def test_requeue_shows_the_next_restart_count_and_node_loss_a_shorter_node_list() -> None:
    requeue, lost, cancel = (facts_of(SIGNALLED[n]) for n in
                             ("scontrol_requeue", "node_failure_term", "scancel_term"))
    assert requeue.requeued and not requeue.nodes_lost
    assert lost.requeued and lost.nodes_lost
    assert not cancel.requeued and cancel.state == "COMPLETING"


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_each_recorded_crash_gets_its_cause(name: str) -> None:
    case = CRASHES[name]
    nodes = {r["NodeName"]: r["State"] for r in map(causes.parse_record, case["scontrol_show_node"])}
    assert causes.crash_cause(facts_of(case), nodes) == case["cause"], nodes


def test_node_records_with_spaces_in_values_parse() -> None:
    line = CRASHES["node_drained"]["scontrol_show_node"][1]
    record = causes.parse_record(line)
    assert record["NodeName"] == "node4" and record["State"] == "IDLE+DRAIN"
    assert record["OS"].startswith("Linux ") and "#1 SMP" in record["OS"]
    assert record["Reason"].startswith("causes-probe-drain")


@pytest.mark.parametrize(("state", "bad"), [
    ("MIXED", False), ("IDLE+COMPLETING+PLANNED", False), ("ALLOCATED", False),
    ("IDLE+DRAIN", True), ("MIXED+DRAIN", True), ("DOWN", True), ("DOWN*", True),
    ("IDLE*", True), ("MIXED+NOT_RESPONDING", True), ("DOWN+NOT_RESPONDING", True),
    ("ALLOCATED+FAIL", True), ("IDLE+POWERED_DOWN", True),
])
def test_node_states(state: str, bad: bool) -> None:
    assert causes.bad_nodes({"cn1": state}) == (["cn1"] if bad else [])


def _other_cluster(line: str) -> str:
    """The same record as a cluster with nodes cn1..cn4 and partitions batch/scavenger would
    print it, with job id 731942 and a 4-node allocation."""
    line = re.sub(r"\bnode\[1-2\]", "cn[3-4,7]", line)
    line = re.sub(r"\bnode(\d)", r"cn\1", line)
    line = line.replace("Partition=low", "Partition=scavenger").replace("Partition=debug", "Partition=batch")
    return re.sub(r"JobId=\d+", "JobId=731942", line)


@pytest.mark.parametrize("name", sorted(SIGNALLED))
def test_another_clusters_names_give_the_same_causes(name: str) -> None:
    case = json.loads(_other_cluster(json.dumps(SIGNALLED[name])))
    facts = facts_of(case)
    assert causes.stop_cause([case["signal"]], facts, case["lead_s"]) == case["cause"]


def test_the_lead_and_slurms_60_s_slack_bound_the_time_limit() -> None:
    base = facts_of(SIGNALLED["user_usr2"])
    near = JobFacts(**{**base.__dict__, "seconds_left": 120 + 60 - 1})
    far = JobFacts(**{**base.__dict__, "seconds_left": 120 + 60 + 1})
    assert causes.stop_cause(["SIGUSR2"], near, 120) == TIME_LIMIT
    assert causes.stop_cause(["SIGUSR2"], far, 120) == USER_SIGNAL


def test_without_slurms_answer_nothing_is_guessed() -> None:
    assert causes.stop_cause(["SIGUSR2"], None, 30, seconds_left=5000) == \
        "signal SIGUSR2 (Slurm gave no record)"
    assert causes.stop_cause(["SIGUSR2"], None, 30, seconds_left=40) == TIME_LIMIT
    assert causes.stop_cause(["SIGUSR2"], None, 30, slurm=False) == USER_SIGNAL  # a local run
    assert causes.crash_cause(None, {}) == TASK_CRASH


def test_an_already_pending_requeued_job_reads_as_requeued() -> None:
    line = SIGNALLED["scontrol_requeue"]["scontrol_show_job"].replace("JobState=COMPLETING",
                                                                      "JobState=PENDING")
    facts = facts_of(SIGNALLED["scontrol_requeue"], line)
    assert causes.stop_cause(["SIGTERM"], facts, 30) == REQUEUED


def test_slurm_facts_asks_scontrol_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    case = SIGNALLED["preempted_usr2"]
    asked: list[tuple[str, ...]] = []

    def scontrol(*args: str) -> str:
        asked.append(args)
        if args[:2] == ("show", "job"):
            return case["scontrol_show_job"] + "\n"
        return "\n".join(CRASHES["node_drained"]["scontrol_show_node"]) + "\n"

    monkeypatch.setattr(slurm_facts, "_scontrol", scontrol)
    env = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_NODELIST": "node[1-2]"}
    facts = slurm_facts.job(env, now=float(case["now"]))
    assert facts is not None and facts.preempted and facts.restart_count == 1
    records = slurm_facts.node_records(env)
    assert slurm_facts.node_states(records) == {"node3": "IDLE+COMPLETING", "node4": "IDLE+DRAIN"}
    assert asked == [("show", "job", "-o", "1"), ("show", "node", "-o", "node[1-2]")]
    assert slurm_facts.job({}) is None  # outside Slurm nothing is asked
    monkeypatch.setattr(slurm_facts, "_scontrol", lambda *a: "")
    assert slurm_facts.job(env) is None and slurm_facts.node_records(env) == {}


def test_a_node_whose_slurmd_takes_no_connection_is_a_node_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """#27, seen on the sandbox: node2's slurmd and processes killed mid-run; node1's ranks lost
    their peer at once and the attempt was recorded "task crash" (slurmctld marks the node
    NOT_RESPONDING only after SlurmdTimeout). Each node's slurmd port is asked directly now."""
    import socket

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        port = listening.getsockname()[1]
        records = {"node1": {"NodeAddr": "127.0.0.1", "State": "MIXED"},
                   "node2": {"NodeAddr": "127.0.0.1", "State": "MIXED"}}
        assert slurm_facts.silent_nodes(records, port) == []
        assert causes.crash_cause(None, slurm_facts.node_states(records)) == TASK_CRASH
        dead = {"node2": {"NodeAddr": "127.0.0.1", "State": "ALLOCATED"}}
        silent = slurm_facts.silent_nodes(dead, closed.getsockname()[1], timeout_s=1)
        assert silent == ["node2"]
        assert causes.crash_cause(None, slurm_facts.node_states(dead), silent) == NODE_FAILURE
    finally:
        listening.close()
        closed.close()
    monkeypatch.setattr(slurm_facts, "_scontrol",
                        lambda *a: "Configuration data as of now\nSlurmdPort              = 7003\n")
    assert slurm_facts.slurmd_port() == 7003
    monkeypatch.setattr(slurm_facts, "_scontrol", lambda *a: "")
    assert slurm_facts.slurmd_port() == 6818  # Slurm's default where scontrol does not say


def test_scontrol_missing_or_failing_gives_empty_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert slurm_facts._scontrol("show", "job", "1") == ""


# -- the node task asks at the first signal and keeps the cause where the next attempt finds it --

def test_node_task_records_the_cause_at_the_signal_for_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from hpc_grpo import rundir
    from hpc_grpo.rundir.contract import STOP_CAUSE_JSON
    from hpc_grpo.runtime.node import task as node
    from hpc_grpo.runtime.rank.checkpoints import restart_record
    from tests.unit.nodefake import minimal_run

    run_dir = minimal_run(tmp_path)
    case = SIGNALLED["preempted_usr2"]
    monkeypatch.setattr(slurm_facts, "_scontrol", lambda *a: case["scontrol_show_job"])
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("SLURM_NODEID", "0")
    task = node.NodeTask(str(run_dir))
    task._on_signal(signal.SIGUSR2, None)
    task._on_signal(signal.SIGTERM, None)  # the grace is over: the first signal's answer stays
    written = json.loads((run_dir / STOP_CAUSE_JSON).read_text())
    assert (written["attempt"], written["cause"], written["signal"]) == ("slurm-1.1", PREEMPTED, "SIGUSR2")
    # The node task was killed before it wrote state.json: the next attempt still names it.
    previous = RunState(attempt="slurm-1.1", phase="training")
    assert restart_record.restart_cause(previous, run_dir) == PREEMPTED
    assert restart_record.restart_cause(dataclasses.replace(previous, attempt="slurm-1.0"), run_dir) == \
        "killed (no stop recorded)"  # another attempt's file says nothing about this one
    assert rundir.read_json(run_dir / "stop-request")["signal"] == "SIGTERM"


def test_a_signal_on_another_node_asks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from hpc_grpo.rundir.contract import STOP_CAUSE_JSON
    from hpc_grpo.runtime.node import task as node
    from tests.unit.nodefake import minimal_run

    run_dir = minimal_run(tmp_path)
    monkeypatch.setattr(slurm_facts, "_scontrol", lambda *a: pytest.fail("asked Slurm"))
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("SLURM_NODEID", "1")
    node.NodeTask(str(run_dir))._on_signal(signal.SIGUSR2, None)
    assert not (run_dir / STOP_CAUSE_JSON).exists()


def test_the_time_limit_signal_while_slurm_shows_signaling() -> None:
    """The chaos benchmark's time-limit USR2 came while scontrol showed JobState=SIGNALING (the
    probe's, a second later, RUNNING): the recorded line with that state, 52 s before the end."""
    case = SIGNALLED["time_limit_usr2"]
    line = case["scontrol_show_job"].replace("JobState=RUNNING", "JobState=SIGNALING")
    facts = facts_of(case, line)
    assert facts.state == "SIGNALING"
    assert causes.stop_cause(["SIGUSR2"], facts, 30) == TIME_LIMIT
    far = JobFacts(**{**facts.__dict__, "seconds_left": 3000.0})
    assert causes.stop_cause(["SIGUSR2"], far, 30) == USER_SIGNAL
