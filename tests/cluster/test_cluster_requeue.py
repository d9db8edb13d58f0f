"""Preemption, time limits, requeues and crashes lose nothing: on the real sandbox cluster.

One uninterrupted reference run; one run interrupted five times in a row, each time differently
(USR2 to the batch shell alone, partition preemption, plain ``scontrol requeue``, ``kill -9`` of
one node's ranks, ``kill -9`` in the middle of a checkpoint write), each restart recorded with
the cause Slurm's records give (docs/causes.md); one run that hits its time limit. Every run
must end at the planned last step, log each step once, and (same seed) log the same per-step
rewards as the reference, in whichever epoch it was resumed; no process of a run may survive on
any node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from hpc_grpo.preflight.requeue_hold import cred_expire_s
from hpc_grpo.scheduler import slurm
from tests.cluster.clusterlib import (
    RECIPE,
    counting_dataset,
    final_state_differs,
    finished,
    job_nodes,
    kill_training,
    restarts,
    rewards,
    status,
    submit,
    wait_for,
    wait_no_processes,
    wait_restarts,
    wait_step,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
STEPS = 60
# 2 nodes x 2 ranks, 4 generations of one prompt a rank: 4 prompts a step. With 32 prompts an
# epoch is 8 steps, so the run spans 7.5 epochs and all but the first interruption resume past
# the first epoch. Steps take at least 0.5 s (a slow reward): on an idle machine the run once
# reached its last step between the wait before the fourth interruption and the kill.
PROMPTS = 32
EPOCH_STEPS = PROMPTS // 4
ARGS = ("--site", "sandbox", "--nodes", "2", "--recipe", str(RECIPE),
        "--reward", "tests.slow.slow_reward:slow_length",
        "--set", f"max_steps={STEPS}", "--set", "save_steps=10")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """``--dataset FILE`` of PROMPTS counting prompts of 1 to 4 numbers (the nodes share /tmp)."""
    return counting_dataset(tmp_path_factory.mktemp("data"), PROMPTS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory,
              dataset: tuple[str, str]) -> tuple[list[tuple[int, float]], Path]:
    """The uninterrupted run's per-step rewards and its run directory."""
    root = tmp_path_factory.mktemp("reference") / "runs"
    run_id, _, run_dir = submit(root, *ARGS, *dataset)
    row = wait_for(run_id, finished, timeout=300)
    assert row["state"] == "COMPLETED", row
    return rewards(run_dir), run_dir


def test_five_different_interruptions_in_a_row(
        tmp_path: Path, dataset: tuple[str, str],
        reference: tuple[list[tuple[int, float]], Path]) -> None:
    root = tmp_path / "runs"
    run_id, job, run_dir = submit(root, *ARGS, *dataset, "--partition", "low")

    # 1. USR2 to the batch shell alone: the script passes it on to every node task, which
    # checkpoint at one step and requeue (it used to end the job FAILED). A user's signal.
    wait_step(run_id, 4)
    subprocess.run(["scancel", "--signal=USR2", "--batch", job], check=True)
    first = wait_restarts(run_dir, 1)
    assert first["cause"] == "user signal" and first["steps_lost"] == 0, first

    # 2. Partition preemption: a high-priority job needs the very nodes the run holds. Those
    # alone, not every node: scripts/test runs other cluster tests beside this one (debug jobs on
    # the other two nodes, never preempted), and a high job waiting on them would preempt nothing.
    wait_step(run_id, first["resumed_from_step"] + 4)
    held = job_nodes(job)
    assert len(held) == 2, held
    high = subprocess.run(["sbatch", "--parsable", "--partition", "high", "--nodes", "2",
                           "--nodelist", ",".join(held), "--exclusive", "--time", "00:02:00",
                           "--output", "/dev/null", "--wrap", "sleep 5"],
                          capture_output=True, text=True, check=True).stdout.strip()
    second = wait_restarts(run_dir, 2, timeout=240)
    assert second["cause"] == "preempted" and second["steps_lost"] <= 1, second
    assert subprocess.run(["sacct", "-n", "-X", "-j", high, "-o", "State"], capture_output=True,
                          text=True).stdout.split()[0] in ("COMPLETED", "RUNNING", "COMPLETING")

    # 3. Plain `scontrol requeue`: SIGTERM then SIGKILL after KillWait; periodic checkpoints.
    wait_step(run_id, second["resumed_from_step"] + 12)
    subprocess.run(["scontrol", "requeue", job], check=True)
    third = wait_restarts(run_dir, 3)
    assert third["cause"] == "scontrol requeue", third

    # 4. kill -9 of one node's training processes: a crash, retried from the newest checkpoint.
    wait_step(run_id, third["resumed_from_step"] + 12)
    nodes = job_nodes(job)  # where this attempt runs (not always node1, node2: shared sandbox)
    assert len(nodes) == 2, nodes
    assert kill_training(nodes[1:], run_dir) >= 1
    fourth = wait_restarts(run_dir, 4)
    assert fourth["cause"] == "task crash", fourth  # the node itself stayed up
    assert json.loads((run_dir / "retries.jsonl").read_text().splitlines()[0])["exit_code"] != 0

    # 5. kill -9 while a checkpoint is being written: the half-written one is never picked.
    (run_dir / "fault-save-delay").write_text("30")
    deadline = time.monotonic() + 120
    while not (run_dir / "fault-saving").exists():
        assert time.monotonic() < deadline, "the fault window never opened"
        time.sleep(0.2)
    half = int((run_dir / "fault-saving").read_text())
    time.sleep(1.0)
    kill_training(job_nodes(job), run_dir)
    fifth = wait_restarts(run_dir, 5)
    assert fifth["resumed_from_step"] < half, (fifth, half)
    assert not (run_dir / "checkpoints" / f"checkpoint-{half}" / "hpc_grpo_complete.json").exists() \
        or fifth["resumed_from_step"] != half

    row = wait_for(run_id, finished, timeout=300)
    assert row["state"] == "COMPLETED" and row["step"] == STEPS, row
    assert row["requeues"] == 5
    got = rewards(run_dir)
    assert [s for s, _ in got] == list(range(1, STEPS + 1))  # each step once
    assert got == reference[0]  # same per-step rewards as the uninterrupted run
    assert final_state_differs(run_dir, reference[1], STEPS) == []  # and the same weights, to the bit
    later = [r["resumed_from_step"] for r in restarts(run_dir) if r["resumed_from_step"] >= EPOCH_STEPS]
    assert len(later) >= 3, restarts(run_dir)  # resumed past the first epoch (the same data order)
    assert wait_no_processes(str(run_dir)) == {}
    final = status(run_id)
    assert [r["cause"] for r in final["restarts"]][:4] == \
        ["user signal", "preempted", "scontrol requeue", "task crash"]
    # one startup.jsonl line per attempt (each on 2 Slurm nodes); status quotes the last
    starts = [json.loads(x) for x in (run_dir / "startup.jsonl").read_text().splitlines()]
    assert [s["resumed_from_step"] for s in starts] == \
        [None, *(r["resumed_from_step"] for r in restarts(run_dir))]
    assert final["startup"].startswith(f"start-up (resumed from step {fifth['resumed_from_step']})")
    assert all(s["trainer_parts_s"]["model_load"] > 0 for s in starts), starts  # TRL's load timed
    assert all("accelerate_prepare" in s["prepare_parts_s"] for s in starts), starts
    # status names each part's split inside it, largest first
    inner = dict(re.findall(r"(trainer and engine|prepare and load) [\d.]+ \(([^)]*)\)",
                            final["startup"]))
    assert "model load " in inner["trainer and engine"], final["startup"]
    assert "model checkpoint load " in inner["prepare and load"], final["startup"]
    # Slurm held each requeued attempt as long as doctor's "requeue hold" says (cred_expire + 1)
    expire = cred_expire_s(slurm.scontrol_show("config"))
    assert expire is not None
    waits = requeue_waits(job)
    assert len(waits) == 5, waits  # each of the five faults requeued the job through Slurm
    assert all(expire <= wait <= expire + 2 for wait in waits), (expire, waits)


def requeue_waits(job: str) -> list[float]:
    """Seconds from each requeue (a later attempt's Submit) to its Eligible, from sacct -D."""
    text = subprocess.run(["sacct", "-D", "-X", "-P", "-n", "-j", job, "-o", "Submit,Eligible"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "SLURM_TIME_FORMAT": "standard"}).stdout
    rows = [line.split("|") for line in text.split()]
    return [(datetime.fromisoformat(eligible) - datetime.fromisoformat(submit)).total_seconds()
            for submit, eligible in rows[1:]]


# Each at least 1 s, and a save every 3 steps holds training about 1 s more while the write
# before it ends (2 files of rank 0 at 2 s each, faults/slow_writes.py): 70 steps take more than
# the 120 s limit less its 30 s lead holds (90 steps of 1 s did, before the background saves).
LIMITED_STEPS = 70


def test_time_limit_with_signal_lead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-minute limit with a 30 s signal lead: checkpoint, requeue, resume, finish.

    With periodic saves written in the background (#59, async_save) whose every file starts
    2 s late (faults/slow_writes.py): rank 0's two files a save take longer than the 3 steps
    between saves, so the limit's signal finds a write in flight, which the stop's save gives
    up, writing its own step at once (a stop needs one save's time, not two).

    Steps take at least 1 s (a slow reward), so 90 steps cannot fit in the at most 90 s one
    attempt trains, start-up included (at 0.5 s they did once, on an idle machine, and nothing
    was requeued). 110 steps took three attempts under CI's load (349 s); 90 take two at most
    loads, and the second may still hit its own limit.
    """
    root = tmp_path / "runs"
    monkeypatch.setenv("HPC_GRPO_FAULT_BACKGROUND_WRITE_DELAY_S", "2")  # sbatch exports it
    run_id, _, run_dir = submit(root, "--site", "sandbox", "--nodes", "2", "--recipe", str(RECIPE),
                                "--reward", "tests.slow.slow_reward:one_second_length",
                                "--set", f"max_steps={LIMITED_STEPS}", "--set", "save_steps=3",
                                "--set", "async_save=true", "--time", "00:02:00")
    row = wait_for(run_id, finished, timeout=600)
    assert row["state"] == "COMPLETED" and row["step"] == LIMITED_STEPS, row
    found = restarts(run_dir)
    assert found and all(r["cause"] == "time limit" and r["steps_lost"] <= 1 for r in found), found
    log = (run_dir / "logs" / "rank-0.log").read_text()
    for stop in found:  # the write in flight at the signal, given up for the stop's save
        step = stop["resumed_from_step"]
        before = log[:log.index(f"checkpoint-{step} saved in")]
        tail = before[before.rindex(f"[stop] step {step}: stopping"):]
        assert " given up (" in tail and "written in the background" in tail, tail
    assert [s for s, _ in rewards(run_dir)] == list(range(1, LIMITED_STEPS + 1))
    assert wait_no_processes(str(run_dir)) == {}
