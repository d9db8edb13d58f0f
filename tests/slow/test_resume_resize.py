"""`hpc-grpo resume RUN --procs-per-node 1` on the local site (issue 60): a 1 x 2 run stopped at a
checkpoint continues at 1 x 1 with the global batch and the data order of an uninterrupted 1 x 2
run.

8 prompts, num_generations 4, 4 completions per device: 1 x 2 trains 2 prompts (8 completions) a
step, an epoch is 4 steps. The run stops exactly at step 3 (the test reward asks for it), is
resumed at 1 x 1 (per-device 4 x accumulation 2: the same 8 completions a step) and trains to
step 6, across the epoch boundary. Everything asserted comes from the run's own records:
run.json, plan.txt, jobs.jsonl, restarts.jsonl, metrics.jsonl, status, and the prompts the
reward saw on each rank (tests/slow/resume_reward.py). 199 s on 2 shared cores (three launches
through the CLI). Measured after the change (steps 4-6, against the 1 x 2 run): reward mean
differs by -7.9, +4.4, +8.9 and the loss by -0.19, +0.09, +0.11 (each rank samples anew).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO
from tests.slow.resume_runs import counting_prompts, prompts_per_step, step_rows
from tests.slow.runtime_slow_helpers import state

pytestmark = pytest.mark.slow
CLI = str(Path(sys.executable).with_name("hpc-grpo"))
STEPS, STOP, PROMPTS = 6, 3, 8
LINE = "resumed at 1 x 1 from 1 x 2, global batch 8 kept: per-device 4 x accumulation 2"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=env)


def _run(root: Path, run_id: str, stop: int | None) -> tuple[Path, dict[str, str]]:
    """Submit run_id on the local site at 1 x 2 and follow it until its job ends."""
    run_dir = root / "runs" / run_id
    env = {**os.environ, "HPC_GRPO_HOME": str(root / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HPC_GRPO_TEST_RUN_DIR": str(run_dir),
           "HPC_GRPO_TEST_STOP_AT": str(stop) if stop else ""}
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)["name"]
    done = _cli(env, "submit", "--site", "local", "--model", "builtin:tiny", "--dataset", dataset,
                "--reward", "tests.slow.resume_reward:on_ranks_only",
                "--procs-per-node", "2", "--output-root", str(root / "runs"), "--run-id", run_id,
                "--set", f"max_steps={STEPS}", "--set", "per_device_train_batch_size=4",
                "--set", "num_generations=4", "--set", "max_completion_length=32",
                "--set", "learning_rate=0.01", "--set", "save_steps=1000")
    assert (run_dir / "state.json").is_file(), done.stdout + done.stderr
    assert state(run_dir)["step"] == (stop or STEPS), done.stdout + done.stderr
    return run_dir, env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(uninterrupted 1 x 2 run, run stopped at STOP and resumed at 1 x 1, resume's output)."""
    root = tmp_path_factory.mktemp("resize")
    reference, _ = _run(root, "reference", None)
    stopped, env = _run(root, "stopped", STOP)
    assert state(stopped)["phase"] == "interrupted"
    resumed = _cli(env, "resume", "stopped", "--procs-per-node", "1", "--wait")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return reference, stopped, resumed.stderr


def _prompts_per_step(run_dir: Path, ranks: int) -> dict[int, list[Any]]:
    """Each step's prompts, rank after rank (a 1 x 2 step's global batch in sampler order)."""
    out: dict[int, list[Any]] = {}
    for rank in range(ranks):
        for step, prompts in prompts_per_step(run_dir, rank):
            out.setdefault(step, []).extend(prompts)
    return out


def test_the_global_batch_is_kept_and_recorded(runs: tuple[Path, Path, str]) -> None:
    reference, stopped, output = runs
    assert LINE in output  # what resume printed
    ref, now = (json.loads((r / "run.json").read_text()) for r in (reference, stopped))
    assert (ref["world_size"], now["world_size"]) == (2, 1)
    batch = {k: now["grpo_config"].get(k) for k in ("per_device_train_batch_size",
                                                     "gradient_accumulation_steps")}
    assert batch == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    assert ref["grpo_config"]["per_device_train_batch_size"] * ref["world_size"] == \
        4 * 2 * 1 == 8
    assert (stopped / "plan.txt").read_text().rstrip().endswith(LINE)
    jobs = [json.loads(x) for x in (stopped / "jobs.jsonl").read_text().splitlines()]
    assert jobs[-1]["layout_change"] == LINE and jobs[-1]["resumed_from_step"] == STOP
    (restart,) = [json.loads(x) for x in (stopped / "restarts.jsonl").read_text().splitlines()]
    assert (restart["stopped_at_step"], restart["resumed_from_step"], restart["steps_lost"]) == \
        (STOP, STOP, 0)
    shown = _cli({**os.environ, "HPC_GRPO_HOME": str(stopped.parent.parent / "home")},
                 "status", str(stopped))
    assert LINE in shown.stdout, shown.stdout + shown.stderr
    log = (stopped / "logs" / "rank-0.log").read_text()
    assert "RNG state: rng_state_0.pth (rank 0's, saved by a run of another world size)" in log


def test_every_step_draws_the_uninterrupted_runs_prompts(runs: tuple[Path, Path, str]) -> None:
    reference, stopped, _ = runs
    ref = _prompts_per_step(reference, 2)
    got = _prompts_per_step(stopped, 2)
    assert sorted(ref) == sorted(got) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert len(got[step]) == 8, (step, got[step])  # 8 completions a step, before and after
        assert got[step] == ref[step], f"step {step}: the prompts differ"
    # the two ranks' halves before the change, rank 0 alone after it
    assert [s for s, _ in prompts_per_step(stopped, 1)] == list(range(1, STOP + 1))
    epochs = [p for step in range(1, 5) for p in dict.fromkeys(ref[step])]
    assert len(set(epochs)) == PROMPTS  # steps 1-4 are one epoch: every prompt once


def test_steps_before_the_change_are_bit_identical(runs: tuple[Path, Path, str]) -> None:
    reference, stopped, _ = runs
    ref, got = step_rows(reference), step_rows(stopped)
    assert [r[0] for r in ref] == [g[0] for g in got] == list(range(1, STEPS + 1))
    assert got[:STOP] == ref[:STOP]
    after = [(r[0], g[1] - r[1], g[3] - r[3]) for r, g in zip(ref[STOP:], got[STOP:], strict=True)]
    print(f"\nafter the change (step, reward mean diff, loss diff): {after}")
    assert all(math.isfinite(v) for row in got for v in row[1:])
