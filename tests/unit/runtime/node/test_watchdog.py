"""The hang watchdog (issue #13): the pure stall decision, the ranks' heartbeats, the planned
collective timeout, the node task's retry of a stalled attempt and what status shows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import api, rundir
from hpc_grpo.errors import UserError
from hpc_grpo.planner.timeouts import FLOOR_S, collective_timeout
from hpc_grpo.planner.timing import Timings
from hpc_grpo.rundir.contract import (
    CONFIGURATION_ERROR,
    DEFAULT_COLLECTIVE_TIMEOUT_S,
    STALLED,
    RunRecord,
    WatchdogBlock,
)
from hpc_grpo.runs import runfiles, track, views
from hpc_grpo.runtime.node import stall, watchdog
from hpc_grpo.runtime.node.stall import Beat, Policy, judge
from hpc_grpo.runtime.rank.faults import hang as hang_fault
from hpc_grpo.runtime.rank.observe import heartbeat
from tests.paths import SITE_CONFIGS
from tests.unit.runtime.node.config_error_node_helpers import _node_task

POLICY = Policy(startup_s=100.0, min_s=10.0, factor=3.0)
T0 = 1_000_000.0  # the attempt's start


def beat(rank: int, step: int = 5, *, at: float, mark: int = 0, block: str = "",
         phase: str = "training", slowest: float | None = 2.0, done: int = 5,
         attempt: str = "a1") -> Beat:
    return Beat(rank=rank, attempt=attempt, phase=phase, step=step, steps_done=done, mark=mark,
                block=block, time=at, slowest_s=slowest)


def level(at: float, world: int = 4, **kw: Any) -> dict[int, Beat | None]:
    return {r: beat(r, at=at, **kw) for r in range(world)}


# -- the pure decision -------------------------------------------------------------------------

def test_start_up_is_judged_by_the_allowance_from_the_attempts_start() -> None:
    assert judge({}, 2, "a1", T0 + 99, T0, POLICY) is None
    found = judge({}, 2, "a1", T0 + 101, T0, POLICY)
    assert found is not None and found.ranks_behind == () and found.steps == (-1, -1)
    assert found.line() == ("no progress for 101s (bound 100s): all 2 ranks stopped at "
                            "start-up (no heartbeat)")


def test_an_earlier_attempts_heartbeats_count_as_none() -> None:
    old = level(T0 - 500, 2, attempt="a0")  # long silent, but from the attempt before
    assert judge(old, 2, "a1", T0 + 50, T0, POLICY) is None
    assert judge(old, 2, "a1", T0 + 101, T0, POLICY) is not None


def test_the_bound_follows_the_slowest_recent_step_of_any_rank() -> None:
    beats = level(T0 + 200, 2, slowest=2.0)
    assert judge(beats, 2, "a1", T0 + 209.9, T0, POLICY) is None  # min_s 10 > 3 x 2
    assert judge(beats, 2, "a1", T0 + 210.1, T0, POLICY) is not None
    beats[1] = beat(1, at=T0 + 200, slowest=8.0)  # one rank measured a slow step: 3 x 8 = 24
    assert judge(beats, 2, "a1", T0 + 223, T0, POLICY) is None
    found = judge(beats, 2, "a1", T0 + 225, T0, POLICY)
    assert found is not None and found.bound_s == 24 and found.idle_s == 25


def test_one_rank_still_progressing_is_no_stall() -> None:
    beats = level(T0 + 200, 4)
    beats[2] = beat(2, at=T0 + 290)  # e.g. the others' heartbeat files cannot be written
    assert judge(beats, 4, "a1", T0 + 295, T0, POLICY) is None


def test_a_save_gets_the_measured_checkpoint_time_or_the_start_up_allowance() -> None:
    beats = level(T0 + 200, 2, phase="saving")
    assert judge(beats, 2, "a1", T0 + 200 + 10 + 3 * 20 - 1, T0, POLICY, checkpoint_s=20) is None
    assert judge(beats, 2, "a1", T0 + 200 + 10 + 3 * 20 + 1, T0, POLICY, checkpoint_s=20)
    assert judge(beats, 2, "a1", T0 + 200 + 10 + 99, T0, POLICY) is None  # none measured yet
    found = judge(beats, 2, "a1", T0 + 200 + 10 + 101, T0, POLICY)
    assert found is not None and "saving after step 5" in found.line()


def test_the_end_of_training_gets_the_start_up_allowance_too() -> None:
    beats = level(T0 + 200, 2, phase="ending")
    assert judge(beats, 2, "a1", T0 + 300, T0, POLICY) is None
    found = judge(beats, 2, "a1", T0 + 311, T0, POLICY)
    assert found is not None and found.where == ("the end, after step 5",) * 2


def test_a_rank_without_a_step_in_this_attempt_waits_for_the_start_up_allowance() -> None:
    beats = level(T0 + 20, 2)
    beats[1] = beat(1, step=-1, at=T0 + 5, phase="setup", done=0, slowest=None)
    assert judge(beats, 2, "a1", T0 + 90, T0, POLICY) is None  # rank 1 is still starting
    found = judge(beats, 2, "a1", T0 + 101, T0, POLICY)
    assert found is not None and found.ranks_behind == (1,)
    assert found.where == ("step 6, start", "start-up")


def test_the_rank_everyone_waits_for_is_named() -> None:
    """Rank 1 hangs in its reward: it finished generation, the others also their reward."""
    beats = level(T0 + 200, 4, step=2, mark=3, block="slow_length")
    beats[1] = beat(1, step=2, at=T0 + 199, mark=2, block="transformers.generate")
    found = judge(beats, 4, "a1", T0 + 260, T0, POLICY)
    assert found is not None and found.ranks_behind == (1,) and found.steps == (2, 2, 2, 2)
    assert found.line() == ("no progress for 60s (bound 10s): rank 1 behind at step 3, after "
                            "transformers.generate; the others at step 3, after slow_length")
    record = found.to_dict()
    assert record["ranks_behind"] == [1] and record["line"] == found.line()
    beats[3] = beat(3, step=1, at=T0 + 150, mark=4, block="compute_loss")  # a step behind
    assert stall.behind(beats, 4) == (1, 3)


def test_a_missing_rank_is_behind_every_rank_with_a_heartbeat() -> None:
    beats: dict[int, Beat | None] = {0: beat(0, step=-1, at=T0, phase="setup", done=0), 1: None}
    assert stall.behind(beats, 2) == (1,)
    assert stall.behind({}, 3) == ()


@pytest.mark.parametrize("data", [None, [], {"rank": 0}, {"rank": "x", "time": 1},
                                  {"rank": 0, "time": "soon"}, {"time": 1.0}])
def test_a_heartbeat_file_that_is_not_one_reads_as_none(data: Any) -> None:
    assert Beat.from_dict(data) is None


def test_poll_interval_is_a_quarter_of_the_smallest_bound_within_1_to_10_s() -> None:
    assert stall.poll_interval(Policy(1800, 300, 3)) == 10
    assert stall.poll_interval(Policy(120, 12, 3)) == 3
    assert stall.poll_interval(Policy(2, 1, 3)) == 1


# -- the ranks' side ---------------------------------------------------------------------------

def test_heartbeats_a_rank_writes_are_what_the_watchdog_reads(tmp_path: Path) -> None:
    beat0 = heartbeat.Heartbeat(tmp_path, 0, "a1")
    beat0._write()
    assert watchdog.read_beats(str(tmp_path), 2)[1] is None
    first = watchdog.read_beats(str(tmp_path), 2)[0]
    assert first is not None and (first.phase, first.step, first.steps_done) == ("setup", -1, 0)
    beat0.train_begin(10)  # resumed at step 10
    beat0.mark("transformers.generate")
    beat0.mark("length")
    got = watchdog.read_beats(str(tmp_path), 1)[0]
    assert got is not None and (got.step, got.mark, got.block) == (10, 2, "length")
    beat0.step_end(11, saving=True)
    got = watchdog.read_beats(str(tmp_path), 1)[0]
    assert got is not None and (got.phase, got.step, got.steps_done, got.mark) == \
        ("saving", 11, 1, 0)
    assert got.slowest_s is not None and got.slowest_s >= 0
    beat0.saved()
    beat0.recent.extend([5.0, 1.0])
    beat0.step_end(12, saving=False)
    raw = json.loads((tmp_path / "heartbeats" / "rank-0.json").read_text())
    assert (raw["phase"], raw["slowest_s"], raw["attempt"]) == ("training", 5.0, "a1")


def test_the_hang_fault_blocks_its_rank_once_at_its_step(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def length(completions: list[str], **_: Any) -> list[float]:
        return [float(len(c)) for c in completions]

    env = {hang_fault.RANK_ENV: "1", hang_fault.STEP_ENV: "3"}
    assert hang_fault.wrap_rewards([length], env, tmp_path, 0) == [length]  # another rank
    assert hang_fault.wrap_rewards([length], {}, tmp_path, 1) == [length]
    wrapped = hang_fault.wrap_rewards([length], env, tmp_path, 1)[0]
    assert wrapped.__name__ == "length"  # TRL names the reward's metrics by it

    class Blocked(Exception):
        pass

    def sleep(_: float) -> None:
        raise Blocked

    monkeypatch.setattr(hang_fault.time, "sleep", sleep)
    state = type("State", (), {"global_step": 1})()
    assert wrapped(completions=["ab"], trainer_state=state) == [2.0]  # step 2: trains on
    state.global_step = 2
    with pytest.raises(Blocked):
        wrapped(completions=["ab"], trainer_state=state)
    assert (tmp_path / hang_fault.MARKER).exists()
    assert wrapped(completions=["ab"], trainer_state=state) == [2.0]  # the retry trains through


# -- the node task: signal, record, end; a stall is retried, never a configuration error -------

FAKE_RANK = ("import faulthandler, signal, sys, time\n"
             "faulthandler.register(signal.SIGQUIT, all_threads=True)\n"
             "print('ready', flush=True)\n"
             "def waiting_in_a_collective():\n"
             "    time.sleep(600)\n"
             "waiting_in_a_collective()\n")


def test_the_watchdog_dumps_the_ranks_stacks_records_and_ends_the_attempt(tmp_path: Path) -> None:
    """A stand-in torchrun with one rank that never beats: after the 1 s start-up allowance its
    stack is in its log, state.json says stalled, and torchrun has ended non-zero."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": str(run_dir), "model": "m",
                               "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                               "watchdog": {"startup_s": 1, "min_s": 1}})
    log = run_dir / "rank-0.log"
    agent = ("import subprocess, sys\n"
             f"rank = subprocess.Popen([sys.executable, '-c', {FAKE_RANK!r}, "
             f"'hpc_grpo.runtime.rank.train'], stdout=open({str(log)!r}, 'w'), "
             "stderr=subprocess.STDOUT)\n"
             "sys.exit(rank.wait() and 1)\n")
    proc = subprocess.Popen([sys.executable, "-c", agent])
    started = time.time()
    dog = watchdog.start_for(run, str(run_dir), "a1", started, proc, records=True)
    assert dog is not None
    rc = proc.wait(timeout=60)
    dog.stop()
    assert rc != 0 and dog.fired is not None and time.time() - started < 30
    text = log.read_text()
    assert "Current thread 0x" in text or "Thread 0x" in text, text
    assert 'File "<string>", line 5 in waiting_in_a_collective' in text, text
    state = rundir.read_state(run_dir)
    assert state["stop_cause"] == STALLED and state["stalled"]["attempt"] == "a1"
    assert state["message"].startswith("no progress for ")


def test_no_watchdog_for_the_doctors_check(tmp_path: Path) -> None:
    run = RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": str(tmp_path), "model": "m",
                               "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                               "payload": "check"})
    assert watchdog.start_for(run, str(tmp_path), "a", 0.0, None, records=True) is None  # type: ignore[arg-type]


def test_a_stalled_attempt_is_requeued_as_stalled_even_after_a_configuration_error_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpc_grpo.runtime.node import task as node

    run_dir, called = _node_task(tmp_path, monkeypatch, phase="failed", message="x",
                                 stop_cause=CONFIGURATION_ERROR)

    class Fired:
        fired = stall.Stall((1,), (2, 2), ("a", "b"), 30.0, 10.0)

        def stop(self) -> None:
            pass

    monkeypatch.setattr(node.watchdog, "start_for", lambda *_, **__: Fired())
    assert node.NodeTask(str(run_dir))() == 1  # requeued, not failed
    assert called == [["scontrol", "requeue", "7"]]
    assert rundir.read_state(run_dir)["stop_cause"] == STALLED


def test_a_stall_recorded_in_state_is_requeued_as_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", stop_cause=STALLED)
    from hpc_grpo.runtime.node import task as node

    assert node.NodeTask(str(run_dir))() == 1
    assert called == [["scontrol", "requeue", "7"]]
    assert rundir.read_state(run_dir)["stop_cause"] == STALLED


# -- the planned collective timeout ------------------------------------------------------------

def test_collective_timeout_from_the_plan() -> None:
    assert collective_timeout(None, 1800, 300) == (1800, collective_timeout(None, 1800, 300)[1])
    assert collective_timeout(None, 120, 10)[0] == FLOOR_S  # never under the floor
    assert collective_timeout(None, 120, 400)[0] == 800  # twice the watchdog's least wait
    small = collective_timeout(Timings(checkpoint_s=5.0, step_s=2.0, source_run="r-1"), 1800, 300)
    assert small[0] == FLOOR_S and "r-1" in small[1]
    big, why = collective_timeout(Timings(checkpoint_s=200.0, step_s=150.0, source_run="r-2"),
                                  1800, 300)
    assert big == 4 * 150 + 2 * 200 + 60 and "r-2" in why
    assert collective_timeout(Timings(200.0, 150.0, "r"), 1800, 300, job_s=7200)[0] == 7200


def test_run_json_carries_the_watchdog_and_the_timeout_and_older_files_still_load() -> None:
    base = {"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m", "dataset": {"name": "d"},
            "nodes": 1, "procs_per_node": 1}
    old = RunRecord.from_dict(base)
    assert old.watchdog == WatchdogBlock() and old.collective_timeout_s == DEFAULT_COLLECTIVE_TIMEOUT_S
    new = RunRecord.from_dict({**base, "watchdog": {"startup_s": 60, "min_s": 5, "factor": 2.0},
                               "collective_timeout_s": 900})
    again = RunRecord.from_dict(json.loads(json.dumps(new.to_dict())))
    assert again.watchdog == WatchdogBlock(60, 5, 2.0) and again.collective_timeout_s == 900


def _site(tmp_path: Path, **keys: Any) -> str:
    text = (SITE_CONFIGS / "sandbox.yaml").read_text()
    path = tmp_path / "hang-sandbox.yaml"
    path.write_text(text + "".join(f"{k}: {v}\n" for k, v in keys.items()))
    return str(path)


def test_the_sites_bounds_reach_run_json_and_the_plan_says_the_timeout(tmp_path: Path) -> None:
    site = _site(tmp_path, watchdog_startup_s=120, watchdog_min_s=15)
    prepared = api.prepare(api.Request(site=site, flags={"model": "builtin:tiny", "time": "10"},
                                       output_root=str(tmp_path / "runs"),
                                       python="/usr/bin/python3"))
    record = prepared.plan.run_record("r", "/r")
    assert record.watchdog == WatchdogBlock(startup_s=120, min_s=15)
    assert record.collective_timeout_s == FLOOR_S
    assert f"# collective timeout: {FLOOR_S}s: no step measured yet" in prepared.summary
    with pytest.raises(UserError, match="watchdog_min_s must be at least 1"):
        api.prepare(api.Request(site=_site(tmp_path, watchdog_min_s=0),
                                flags={"model": "builtin:tiny"},
                                output_root=str(tmp_path / "runs"), python="/usr/bin/python3"))


def test_the_ranks_get_the_planned_timeout_as_ddp_timeout_unless_the_job_set_one(
    tmp_path: Path,
) -> None:
    from hpc_grpo.runtime.rank.setup.grpo_args import grpo_kwargs

    base = {"schema": 1, "run_id": "r", "run_dir": str(tmp_path), "model": "m",
            "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1, "collective_timeout_s": 700}
    known = ["output_dir", "seed", "use_cpu", "use_vllm", "bf16", "fp16", "ddp_timeout",
             "logging_steps", "report_to", "disable_tqdm", "save_strategy", "save_steps",
             "save_total_limit"]
    kwargs, _ = grpo_kwargs(RunRecord.from_dict(base), tmp_path, known)
    assert kwargs["ddp_timeout"] == 700
    own = RunRecord.from_dict({**base, "grpo_config": {"ddp_timeout": 3600}})
    assert grpo_kwargs(own, tmp_path, known)[0]["ddp_timeout"] == 3600


# -- status ------------------------------------------------------------------------------------

def test_status_shows_stalled_and_the_ranks_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    found = stall.Stall((1,), (2, 2, 2, 2), ("step 2, after generate", "step 2", "x", "y"), 31, 15)
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "hang-0001"}))
    (tmp_path / "state.json").write_text(json.dumps(
        {"phase": "training", "step": 2, "stop_cause": STALLED, "message": found.line(),
         "stalled": {**found.to_dict(), "attempt": "slurm-5.0"}}))
    progress = runfiles.read_run(tmp_path).progress
    assert progress.stalled == found.line() and progress.stalled_ranks == (1,)
    row = track.RunStatus(
        run_id="hang-0001", run_dir=str(tmp_path), site="sandbox", job_id="5", state="RUNNING",
        finished=False, meaning="", phase="training", step=2, max_steps=12, reward=None,
        tokens_per_s=None, checkpoint_step=2, checkpoint_time=None, requeues=0,
        nodes="node[1-2]", stalled=progress.stalled, stalled_ranks=progress.stalled_ranks)
    monkeypatch.setenv("COLUMNS", "80")
    views.status_table([row])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[2] == "STALLED" and all(len(line) <= 80 for line in out[:2])
    assert f"hang-0001: stalled: {found.line()}" in out
    assert views._mark(track.RunStatus(**{**row.to_dict(), "finished": True,
                                          "state": "FAILED"})) == "FAILED"
    # the next attempt's rank 0 clears stop_cause: the finding is history (restarts.jsonl)
    state = json.loads((tmp_path / "state.json").read_text())
    (tmp_path / "state.json").write_text(json.dumps({**state, "stop_cause": None}))
    assert runfiles.read_run(tmp_path).progress.stalled == ""
