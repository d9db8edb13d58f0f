"""End to end on this machine: the node task runs torchrun 1 node x 2 processes (gloo, CPU).

Slow: each training run takes 15-25 s on 2 cores. `pytest -m slow tests/slow/test_runtime_slow.py`.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime.rank.checkpoints.folders import is_complete
from tests.slow.runtime_slow_helpers import (
    STEPS,
    metrics,
    node_cmd,
    node_env,
    run_node,
    signal_tree,
    state,
    write_run,
)
from tests.slow.runtime_slow_helpers import tiny_model as tiny_model  # noqa: F401, F811 (a fixture)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run, shared by the tests below."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    write_run(run_dir, tiny_model)
    proc = run_node(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir


def test_node_run_trains_to_done(reference: Path) -> None:
    rows = metrics(reference)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        assert row["max_steps"] == STEPS and row["reward_mean"] is not None
        assert row["step_time"] > 0 and row["tokens_per_s"] > 0 and row["completion_length"] > 0
        split = row["phases_s"]  # TRL's own blocks of this step (generation inside the inputs)
        assert 0 < split["generate_s"] < split["prepare_inputs_s"] < row["step_time"]
        assert split["loss_forward_s"] > 0 and "sync_weights_s" not in split  # no vLLM on CPU
    ranks = json.loads((reference / "ranks.json").read_text())["ranks"]
    assert [(r["rank"], r["local_rank"], r["node"], r["vllm_seed"]) for r in ranks] == [
        (0, 0, 0, 0),
        (1, 1, 0, 1),
    ]
    assert {r["hostname"] for r in ranks} == {socket.gethostname()}
    st = state(reference)
    assert st["phase"] == "done" and st["step"] == STEPS and st["last_checkpoint_step"] == STEPS
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["reward_delta"] is not None
    assert (reference / "reward_curve.png").stat().st_size > 1000
    assert is_complete(reference / "checkpoints" / f"checkpoint-{STEPS}")
    assert (reference / "logs" / "rank-1.log").exists()
    # A restart of a finished run is a no-op that exits 0 (no extra step).
    again = run_node(reference)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [r["step"] for r in metrics(reference)] == list(range(1, STEPS + 1))
    assert state(reference)["phase"] == "done"


def test_stop_and_resume_matches_uninterrupted(reference: Path, tiny_model: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "stopped"
    write_run(run_dir, tiny_model)
    proc = subprocess.Popen(node_cmd(run_dir), env=node_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.time() + 90
    while len(metrics(run_dir)) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "run ended before it could be signalled"
    signalled = signal_tree(proc.pid, signal.SIGUSR2)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert len(signalled) >= 4  # node task, torchrun agent, two workers

    st = state(run_dir)
    stopped = st["step"]
    assert st["phase"] == "interrupted" and 3 <= stopped < STEPS, st
    assert st["last_checkpoint_step"] == stopped
    assert [p.name for p in (run_dir / "checkpoints").glob("checkpoint-*")] == [f"checkpoint-{stopped}"]
    assert is_complete(run_dir / "checkpoints" / f"checkpoint-{stopped}")
    for rank in (0, 1):  # both ranks agreed on one step
        log = (run_dir / "logs" / f"rank-{rank}.log").read_text()
        assert f"[stop] step {stopped}: stopping" in log
    assert [r["step"] for r in metrics(run_dir)] == list(range(1, stopped + 1))

    again = run_node(run_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    st = state(run_dir)
    assert st["phase"] == "done" and st["step"] == STEPS
    assert st["resumed_from"].endswith(f"checkpoint-{stopped}")
    resumed, ref = metrics(run_dir), metrics(reference)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    assert [(r["reward_mean"], r["reward_std"]) for r in resumed] == [
        (r["reward_mean"], r["reward_std"]) for r in ref
    ]


def test_a_signal_while_the_ranks_start_stops_the_run_before_its_first_step(
        tiny_model: Path, tmp_path: Path) -> None:
    """A stop signal to the node task after it started torchrun but before a rank's interpreter
    began (Slurm's USR2 or a preemption while the ranks import, rendezvous or wait for a vLLM
    server): the request is older than every rank, yet it is this attempt's, so rank 0 must
    keep it, and the ranks stop before their first step (#58: they agree on it once the trainer
    is built), training and saving nothing, not train on until they are killed."""
    import psutil

    run_dir = tmp_path / "early"
    write_run(run_dir, tiny_model)
    proc = subprocess.Popen(node_cmd(run_dir), env=node_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    task = psutil.Process(proc.pid)
    deadline = time.time() + 60
    while not task.children() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)  # torchrun started: the node task's handlers are in place
    assert not (run_dir / "logs" / "rank-0.log").exists(), "a rank started before the signal"
    proc.send_signal(signal.SIGUSR2)  # the node task alone: torchrun's agent ignores it
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    st = state(run_dir)
    assert st["phase"] == "interrupted" and st["step"] == 0, st
    assert st.get("last_checkpoint_step") is None and not list((run_dir / "checkpoints").glob("c*"))
    assert not (run_dir / "metrics.jsonl").exists() or \
        (run_dir / "metrics.jsonl").read_text().strip() == ""  # no step trained
    rank0 = (run_dir / "logs" / "rank-0.log").read_text()
    assert "moved a stop-request" not in rank0
    assert "[stop] before the first step (at step 0): stopping" in rank0


def test_check_payload(tiny_model: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "check"
    write_run(run_dir, tiny_model, payload="check")
    proc = run_node(run_dir, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        seen = json.loads((run_dir / "check" / f"rank-{rank}.json").read_text())
        assert seen["rank"] == rank and seen["world_size"] == 2
        assert seen["allreduce"] == seen["expected"] == 3
        assert seen["master_addr"] == "127.0.0.1"
        assert seen["hostnames"] == [socket.gethostname()] * 2


def test_wrong_rank_table_fails_before_training(tiny_model: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "bad"
    run = write_run(run_dir, tiny_model)
    run["ranks"][1]["vllm_seed"] = 5
    (run_dir / "run.json").write_text(json.dumps(run))
    proc = run_node(run_dir, timeout=60)
    assert proc.returncode != 0
    st = state(run_dir)
    assert st["phase"] == "failed"
    assert "rank 1: run.json has vllm_seed=5, rank computes 1" in st["message"]
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_value_trl_refuses_on_every_rank_is_a_configuration_error(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Issue #13: a GRPOConfig value only TRL's __post_init__ refuses (the login node checks
    types and ranges, not TRL's cross-field rules) fails both ranks alike before the first step:
    recorded as a configuration error with its exception line, in seconds (no peer wait)."""
    run_dir = tmp_path / "config-error"
    run = write_run(run_dir, tiny_model)
    run["grpo_config"]["log_completions_hub_repo"] = "someone/completions"
    (run_dir / "run.json").write_text(json.dumps(run))
    started = time.monotonic()
    proc = run_node(run_dir, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode != 0
    st = state(run_dir)
    assert (st["phase"], st["stop_cause"]) == ("failed", "configuration error"), st
    assert st["message"].startswith("ValueError: log_completions_hub_repo is set, but "
                                    "log_completions is False")
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "setup-errors").iterdir())]
    assert [(r["rank"], r["line"], r["configuration"]) for r in records] == [
        (rank, st["message"], True) for rank in (0, 1)]
    assert took < 50, took  # rank 0 decided when both had reported, not after its 60 s wait
    assert "configuration error, not retried" in (run_dir / "logs" / "rank-1.log").read_text()
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_profile_promising_more_host_memory_than_the_node_has_is_refused(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Issue #29, on CPU: run.json says the profile planned for 100000 GiB of host memory;
    both ranks compare with /proc/meminfo before the model loads and raise the same line, so it
    is a configuration error (not retried) naming both numbers."""
    run_dir = tmp_path / "too-little-memory"
    run = write_run(run_dir, tiny_model)
    run["hardware"] = {"cpu_memory_gib": 100000}
    (run_dir / "run.json").write_text(json.dumps(run))
    proc = run_node(run_dir, timeout=120)
    assert proc.returncode != 0
    st = state(run_dir)
    assert (st["phase"], st["stop_cause"]) == ("failed", "configuration error"), st
    assert st["message"].startswith("HardwareShortfall: the nodes have less than the plan "
                                    "assumed: CPU memory "), st["message"]
    assert "< planned 100000 GiB (cpu_memory_gib)" in st["message"]
    assert "configuration error, not retried" in (run_dir / "logs" / "rank-1.log").read_text()
    assert not (run_dir / "metrics.jsonl").exists()


ASYNC = {"async_save": True}
SLOW_WRITES = {"HPC_GRPO_FAULT_BACKGROUND_WRITE_DELAY_S": "1.5"}  # faults/slow_writes.py


def _async_run(run_dir: Path, tiny_model: Path, **grpo: Any) -> subprocess.Popen[str]:
    """A run whose periodic saves (every 2 steps) are written in the background, each file
    1.5 s late: the step after a save finds its write still in flight."""
    run = write_run(run_dir, tiny_model, **ASYNC)
    run["grpo_config"] = {**run["grpo_config"], "save_steps": 2, **grpo}
    (run_dir / "run.json").write_text(json.dumps(run, indent=2))
    return subprocess.Popen(node_cmd(run_dir), env=node_env() | SLOW_WRITES, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _in_flight(run_dir: Path, proc: subprocess.Popen[str], after: int = 0) -> int:
    """The step of the first background save past ``after`` while its write is in flight."""
    log = run_dir / "logs" / "rank-0.log"
    deadline = time.time() + 90
    while proc.poll() is None and time.time() < deadline:
        text = log.read_text() if log.exists() else ""
        for step in range(after + 2, STEPS, 2):
            if f"checkpoint-{step}: training goes on while" in text:
                assert f"checkpoint-{step} complete" not in text, text  # 1.5 s a file: in flight
                return step
        time.sleep(0.05)
    raise AssertionError(f"no background save in flight (exit {proc.poll()})")


def _same_steps_as(run_dir: Path, reference: Path) -> None:
    """Every step once in metrics.jsonl (its last line, a step redone after a crash logs
    again), each with the uninterrupted run's reward mean and std."""
    rows = {r["step"]: r for r in metrics(run_dir)}
    assert sorted(rows) == list(range(1, STEPS + 1))
    assert [(rows[s]["reward_mean"], rows[s]["reward_std"]) for s in sorted(rows)] == [
        (r["reward_mean"], r["reward_std"]) for r in metrics(reference)]


def test_a_stop_during_a_background_write_gives_it_up_saves_and_resumes_exactly(
        reference: Path, tiny_model: Path, tmp_path: Path) -> None:
    """USR2 while a periodic save is still being written (#59): the stop's save gives that
    write up (never marked, removed once the stop's save is marked) and writes its own step at
    once; the resume equals the uninterrupted run (which saved nothing in between: the
    background saves change no step)."""
    run_dir = tmp_path / "async-stop"
    proc = _async_run(run_dir, tiny_model)
    writing = _in_flight(run_dir, proc)
    signal_tree(proc.pid, signal.SIGUSR2)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    st = state(run_dir)
    stopped = st["step"]
    assert st["phase"] == "interrupted" and writing <= stopped < STEPS, st
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert "test fault: each background checkpoint file is written 1.5 s late" in log
    given_up = log.index(f"checkpoint-{writing} given up")  # at the stop, before its save
    assert log.index(f"[stop] step {stopped}: stopping") < given_up \
        < log.index(f"checkpoint-{stopped} saved in"), log
    assert f"checkpoint-{writing} complete" not in log and stopped > writing
    checkpoints = run_dir / "checkpoints"
    assert is_complete(checkpoints / f"checkpoint-{stopped}")
    assert not (checkpoints / f"checkpoint-{writing}").exists()  # unmarked: removed
    assert st["last_checkpoint_step"] == stopped
    assert st["checkpoint_held_s"] == st["checkpoint_seconds"]  # the stop's: written at once

    again = run_node(run_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert state(run_dir)["resumed_from"].endswith(f"checkpoint-{stopped}")
    _same_steps_as(run_dir, reference)


def test_a_crash_during_a_background_write_resumes_from_the_previous_complete_one(
        reference: Path, tiny_model: Path, tmp_path: Path) -> None:
    """Every process killed while checkpoint-N is written in the background, after N-2 was
    marked, keeping one checkpoint (save_total_limit 1): N has no marker, N-2 is the newest
    complete checkpoint and still there (retention runs only after a marker), and the restart
    resumes from it, exactly."""
    run_dir = tmp_path / "async-crash"
    proc = _async_run(run_dir, tiny_model, save_total_limit=1)
    first = _in_flight(run_dir, proc)
    log = run_dir / "logs" / "rank-0.log"
    deadline = time.time() + 60
    while f"checkpoint-{first} complete" not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)
    writing = _in_flight(run_dir, proc, after=first)
    signal_tree(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    checkpoints = run_dir / "checkpoints"
    assert is_complete(checkpoints / f"checkpoint-{first}")
    assert (checkpoints / f"checkpoint-{writing}").is_dir()
    assert not is_complete(checkpoints / f"checkpoint-{writing}")
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == sorted(
        [f"checkpoint-{first}", f"checkpoint-{writing}"])  # keeping one: no older left

    again = run_node(run_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    st = state(run_dir)
    assert st["phase"] == "done" and st["resumed_from"].endswith(f"checkpoint-{first}"), st
    _same_steps_as(run_dir, reference)
