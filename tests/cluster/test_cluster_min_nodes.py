"""#60's min_nodes on the real sandbox cluster: a node set DOWN mid-run, and the job continues on
the nodes left without anyone resubmitting it, then grows back to its full count.

A 3-node DDP run (one rank a node) with ``--min-nodes 2`` asks Slurm for ``--nodes=2-3``. While
it trains, the fourth node is drained and one of the run's nodes is set DOWN (drained first:
the sandbox's ReturnToService=2 brings a DOWN node whose slurmd still answers back within
seconds, and the requeued job then took all 3 nodes again). Slurm requeues the job itself; with
only 2 nodes free it starts the job on 2, whose node task and ranks lay the attempt out at 2 x 1
(rundir/reshard.record_at): 12 completions a step kept, per-device 3 x accumulation 2. Both
nodes are then resumed and the job requeued by hand: attempt 3 runs on 3 nodes again and
trains to max_steps. Asserted from the run's own records: restarts.jsonl's node counts,
status's line, the rank logs, metrics.jsonl (each step once) and the prompts each rank's reward
saw (12 a step throughout). Whatever happens, every node is left resumed."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.clusterlib import (
    NODES,
    cli,
    finished,
    job_nodes,
    restarts,
    submit,
    wait_for,
    wait_restarts,
    wait_step,
)
from tests.slow.resume_runs import counting_prompts, prompts_per_step

pytestmark = [pytest.mark.cluster, pytest.mark.whole_cluster,  # 4 nodes
              pytest.mark.usefixtures("sandbox_cluster")]
STEPS, PROMPTS, GLOBAL = 12, 24, 12  # 3 ranks x 4 completions; num_generations 4: 3 prompts
REASON = "hpc-grpo test_cluster_min_nodes"


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True, timeout=30)


def _resume_all() -> None:
    """Every sandbox node back in service (a node already idle refuses state=resume: ignored)."""
    for node in NODES:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                       capture_output=True, text=True, timeout=30)


def _wait_all_idle(timeout: float = 180) -> None:
    """Until no job holds a sandbox node: the first attempt too starts as soon as 2 nodes are
    free (Slurm has no wait for the larger count), and one started on 2 shows nothing here."""
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                                text=True, timeout=30).stdout.split("\n")
        if all(line.split()[1] == "idle" for line in states if line.strip()):
            return
        time.sleep(2.0)
    raise AssertionError(f"sandbox nodes not all idle: {states}")


def _nodes_of_attempts(run_dir: Path) -> list[int | None]:
    return [r.get("nodes") for r in restarts(run_dir)]


def _step_after(run_id: str, step: int) -> dict[str, Any]:
    """Until the current attempt has trained past ``step`` with a checkpoint past it too."""
    return wait_for(run_id, lambda r: r["state"] == "RUNNING" and r["phase"] == "training"
                    and (r["checkpoint_step"] or 0) > step, timeout=300, every=1.0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run, taken down to 2 nodes by Slurm and back to 3 by a requeue, finished."""
    root = tmp_path_factory.mktemp("min_nodes")
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)["name"]
    _wait_all_idle()
    run_id, job, run_dir = submit(  # the reward records into the job's HPC_GRPO_RUN_DIR
        root, "--site", "sandbox", "--nodes", "3", "--min-nodes", "2",
        "--procs-per-node", "1", "--model", "builtin:tiny", "--dataset", dataset,
        "--reward", "tests.slow.slow_reward:slow_length_recording", "--run-id", "shrinking",
        "--set", f"max_steps={STEPS}", "--set", "per_device_train_batch_size=4",
        "--set", "num_generations=4", "--set", "max_completion_length=8",
        "--set", "save_steps=2", "--set", "logging_steps=1")
    try:
        wait_step(run_id, 3, timeout=300)  # a checkpoint at step 2 on 3 nodes
        held = job_nodes(job)
        assert len(held) == 3, f"the first attempt started on {held}: was another job running?"
        spare = [n for n in NODES if n not in held]
        for node in spare:  # the full count cannot be had again while the lost node is out
            _scontrol("update", f"nodename={node}", "state=drain", f"reason={REASON}")
        lost = held[-1]
        _scontrol("update", f"nodename={lost}", "state=drain", f"reason={REASON}")
        _scontrol("update", f"nodename={lost}", "state=down", f"reason={REASON}")
        shrunk = wait_restarts(run_dir, 1, timeout=300)  # Slurm requeued it: nobody resubmitted
        assert shrunk.get("nodes") == 2, restarts(run_dir)
        assert len(job_nodes(job)) == 2
        _step_after(run_id, int(shrunk["resumed_from_step"]))  # a checkpoint saved on 2 nodes
        _resume_all()
        time.sleep(2)  # slurmctld sees the nodes idle before the requeue's new attempt asks
        _scontrol("requeue", job)
        grown = wait_restarts(run_dir, 2, timeout=300)
        assert grown.get("nodes") == 3, restarts(run_dir)
        wait_for(run_id, finished, timeout=400)
    finally:
        _resume_all()
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    return run_dir, job


def _state(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "state.json").read_text()))


def test_the_job_continued_on_two_nodes_and_grew_back(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    state = _state(run_dir)
    assert (state["phase"], state["step"]) == ("done", STEPS), state
    assert _nodes_of_attempts(run_dir) == [2, 3], restarts(run_dir)
    record = json.loads((run_dir / "run.json").read_text())  # never rewritten by an attempt
    assert (record["nodes"], record["min_nodes"], record["world_size"]) == (3, 2, 3), record
    shown = cli("status", str(run_dir)).stdout
    assert "attempt 2 on 2 of 3 nodes (min_nodes 2" in shown and "attempt 3 on 3 of 3" in shown, \
        shown
    assert "#SBATCH --nodes=2-3\n" in (run_dir / "job.sbatch").read_text()


def test_the_global_batch_and_each_step_are_kept(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # every step logged once
    # the attempt that trained each step last, and its ranks: restarts.jsonl's boundaries
    attempts = [(0, 3), *((int(r["resumed_from_step"]), int(r["nodes"])) for r in restarts(run_dir))]
    per_step: dict[int, list[Any]] = {}
    for step in range(1, STEPS + 1):
        world = [n for start, n in attempts if start < step][-1]
        for rank in range(world):  # that rank's last record of the step: its final training
            rows = dict(prompts_per_step(run_dir, rank))
            per_step.setdefault(step, []).extend(rows.get(step, []))
    # 12 completions a step at 3 x (4 x 1) and at 2 x (3 x 2): per-device x accumulation x world
    assert {s: len(p) for s, p in per_step.items()} == {s: GLOBAL for s in range(1, STEPS + 1)}
    stopped, grown = int(restarts(run_dir)[0]["stopped_at_step"]), attempts[2][0]
    assert attempts[1][0] < grown, attempts  # some steps were trained on 2 nodes only
    # rank 2 (the third node's) trained none of the steps only the 2-node attempt reached
    only_two = set(range(stopped + 1, grown + 1))
    assert not {s for s, _ in prompts_per_step(run_dir, 2)} & only_two, only_two
