"""`hpc-grpo resume RUN --procs-per-node 1` of a DeepSpeed ZeRO run on the local site (issue 60): a
1 x 2 ZeRO-2 run on CPU (gloo) stopped at a checkpoint continues at 1 x 1, its
shards converted once through DeepSpeed's universal checkpoint (runtime/rank/checkpoints/
universal.py) and reused by a later resume of the same checkpoint.

8 prompts, num_generations 4, 4 completions per device: 1 x 2 trains 2 prompts (8 completions) a
step. Each run stops exactly at step 2 (the test reward asks for it) and is resumed at 1 x 1
(per-device 4 x accumulation 2: the same 8 completions a step). The ZeRO-2 run's first resume
fails at step 3 before any save (the test reward raises: a job lost before its first
checkpoint), so the second resume loads checkpoint-2 at 1 x 1 again and reuses the conversion;
it trains to step 4. (ZeRO-3 ran here too until CI's time asked for one copy: it is resized on
the sandbox cluster, 4 -> 2 -> 4 nodes, tests/cluster/test_cluster_resize.py, with its Adam
step checks.) The data order is an
uninterrupted 1 x 2 ZeRO-2 run's (the prompts a step draws follow the seed and the global batch,
not the ZeRO stage). Everything asserted comes from the runs' own records: run.json, plan.txt,
jobs.jsonl, the checkpoints' folders, markers and Adam step counts, rank 0's log, metrics.jsonl,
and the prompts the reward saw on each rank. Four launches through the CLI (six, 114 s on 2
shared cores, with ZeRO-3; each conversion 2-5 s of it).
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
from tests.slow.resume_runs import adam_steps, counting_prompts, prompts_per_step, step_rows
from tests.slow.runtime_slow_helpers import state

pytestmark = pytest.mark.slow
CLI = str(Path(sys.executable).with_name("hpc-grpo"))
STEPS, STOP, PROMPTS = 4, 2, 8
SPLIT = "resumed at 1 x 1 from 1 x 2, global batch 8 kept: per-device 4 x accumulation 2"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=env)


def _submit(root: Path, run_id: str, zero: int, stop: int | None) -> tuple[Path, dict[str, str]]:
    """Submit run_id under ZeRO-``zero`` on the local site at 1 x 2 and follow it to its end."""
    run_dir = root / "runs" / run_id
    env = {**os.environ, "HPC_GRPO_HOME": str(root / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HPC_GRPO_TEST_RUN_DIR": str(run_dir),
           "HPC_GRPO_TEST_STOP_AT": str(stop) if stop else ""}
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)["name"]
    done = _cli(env, "submit", "--site", "local", "--model", "builtin:tiny", "--dataset", dataset,
                "--reward", "tests.slow.resume_reward:on_ranks_only", "--zero-stage", str(zero),
                "--procs-per-node", "2", "--output-root", str(root / "runs"), "--run-id", run_id,
                "--set", f"max_steps={STEPS}", "--set", "per_device_train_batch_size=4",
                "--set", "num_generations=4", "--set", "max_completion_length=32",
                "--set", "learning_rate=0.01", "--set", "save_steps=1000")
    assert (run_dir / "state.json").is_file(), done.stdout + done.stderr
    assert state(run_dir)["step"] == (stop or STEPS), done.stdout + done.stderr
    return run_dir, env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted ZeRO-2 run, and each stage's stopped and resumed run with the outputs
    of its resumes."""
    root = tmp_path_factory.mktemp("resize-zero")
    reference, _ = _submit(root, "reference", 2, None)
    out: dict[str, Any] = {"reference": reference}
    for zero in (2,):
        run_dir, env = _submit(root, f"zero{zero}", zero, STOP)
        assert state(run_dir)["phase"] == "interrupted"
        outputs = []
        if zero == 2:  # lost at step 3 before a save: the next resume loads checkpoint-2 again
            lost = _cli({**env, "HPC_GRPO_TEST_CRASH_AT": str(STOP + 1)}, "resume", run_id(run_dir),
                        "--procs-per-node", "1", "--wait")
            assert state(run_dir)["phase"] == "failed", lost.stdout + lost.stderr
            assert "test: crash at step 3" in state(run_dir)["message"]
            outputs.append(lost.stderr)
            again = _cli(env, "resume", run_id(run_dir), "--wait")
        else:
            again = _cli(env, "resume", run_id(run_dir), "--procs-per-node", "1", "--wait")
        assert again.returncode == 0, again.stdout + again.stderr
        assert state(run_dir)["phase"] == "done" and state(run_dir)["step"] == STEPS
        out[f"zero{zero}"] = (run_dir, [*outputs, again.stderr])
    return out


def run_id(run_dir: Path) -> str:
    return run_dir.name


def _conversion_lines(run_dir: Path) -> list[str]:
    return [line for line in (run_dir / "logs" / "rank-0.log").read_text().splitlines()
            if line.startswith("[checkpoint] ZeRO-")]


@pytest.mark.parametrize("zero", [2])
def test_the_global_batch_is_kept_and_the_conversion_recorded(runs: dict[str, Any],
                                                              zero: int) -> None:
    run_dir, outputs = runs[f"zero{zero}"]
    line = f"{SPLIT}; ZeRO-{zero} shards converted from 2 to 1 ranks"
    assert line in outputs[0]  # what the first resume printed
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["world_size"], record["deepspeed"]["zero_stage"]) == (1, zero)
    assert {k: record["grpo_config"].get(k) for k in (
        "per_device_train_batch_size", "gradient_accumulation_steps")} == {
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    jobs = [json.loads(x) for x in (run_dir / "jobs.jsonl").read_text().splitlines()]
    resumes = [j for j in jobs if j.get("resumed_from_step") is not None]
    assert resumes[0]["layout_change"] == line and resumes[0]["resumed_from_step"] == STOP
    if zero == 2:  # the second resume keeps 1 x 1: no layout change of the launcher's
        assert (plan := (run_dir / "plan.txt").read_text()) and line not in plan
        assert resumes[1]["resumed_from_step"] == STOP and not resumes[1].get("layout_change")
    else:
        assert (run_dir / "plan.txt").read_text().rstrip().endswith(line)


@pytest.mark.parametrize("zero", [2])
def test_the_checkpoint_is_converted_once_beside_itself(runs: dict[str, Any], zero: int) -> None:
    run_dir, _ = runs[f"zero{zero}"]
    checkpoints = run_dir / "checkpoints"
    saved = checkpoints / f"checkpoint-{STOP}"
    converted = saved / f"global_step{STOP}_universal"
    marker = json.loads((converted / "hpc_grpo_converted.json").read_text())
    assert (marker["tag"], marker["from_world_size"]) == (f"global_step{STOP}", 2)
    assert (saved / "latest_universal").read_text().strip() == converted.name
    assert (converted / "zero" / "model.norm.weight" / "exp_avg.pt").is_file()  # Adam, whole
    # the saved shards stay as DeepSpeed wrote them for 2 ranks
    assert len(list((saved / f"global_step{STOP}").glob("*optim_states.pt"))) == 2
    lines = _conversion_lines(run_dir)
    first = f"[checkpoint] ZeRO-{zero} shards converted from 2 to 1 ranks: checkpoint-{STOP}/" \
            f"global_step{STOP}_universal in "
    assert lines[0].startswith(first), lines
    if zero == 2:
        assert lines[1:] == [f"[checkpoint] ZeRO-2 shards converted from 2 to 1 ranks: reused "
                             f"checkpoint-{STOP}/global_step{STOP}_universal"]
    else:
        assert len(lines) == 1
    # what the resumed job saved is an ordinary ZeRO checkpoint for its 1 rank
    final = checkpoints / f"checkpoint-{STEPS}"
    assert json.loads((final / "hpc_grpo_complete.json").read_text())["world_size"] == 1
    assert len(list((final / f"global_step{STEPS}").glob("*optim_states.pt"))) == 1
    assert not (final / "latest_universal").exists()


def _prompts_per_step(run_dir: Path, ranks: int) -> dict[int, list[Any]]:
    """Each step's prompts, rank after rank (a 1 x 2 step's global batch in sampler order)."""
    out: dict[int, list[Any]] = {}
    for rank in range(ranks):
        for step, prompts in prompts_per_step(run_dir, rank):
            out.setdefault(step, []).extend(prompts)
    return out


@pytest.mark.parametrize("zero", [2])
def test_adam_counts_on_from_the_converted_state(runs: dict[str, Any], zero: int) -> None:
    """The optimizer state was loaded (a fresh one would count 2 at step 4), and ZeRO-3's
    groups count once a step each (universal.py's repair of DeepSpeed's shared step)."""
    run_dir, _ = runs[f"zero{zero}"]
    checkpoints = run_dir / "checkpoints"
    assert set(adam_steps(checkpoints / f"checkpoint-{STOP}")) == {STOP}
    assert set(adam_steps(checkpoints / f"checkpoint-{STEPS}")) == {STEPS}
    log = (run_dir / "logs" / "rank-0.log").read_text()
    repaired = "[checkpoint] universal load: 1 Adam step count(s) shared with another group given"
    assert (repaired in log) is (zero == 3)


@pytest.mark.parametrize("zero", [2])
def test_every_step_draws_the_uninterrupted_runs_prompts(runs: dict[str, Any], zero: int) -> None:
    run_dir, _ = runs[f"zero{zero}"]
    ref, got = _prompts_per_step(runs["reference"], 2), _prompts_per_step(run_dir, 2)
    assert sorted(ref) == sorted(got) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert len(got[step]) == 8 and got[step] == ref[step], (step, got[step], ref[step])


@pytest.mark.parametrize("zero", [2])
def test_training_goes_on_with_finite_losses(runs: dict[str, Any], zero: int) -> None:
    run_dir, _ = runs[f"zero{zero}"]
    rows = step_rows(run_dir)
    assert [r[0] for r in rows] == list(range(1, STEPS + 1))
    assert all(math.isfinite(v) for row in rows for v in row[1:])
    if zero == 2:  # the same run's steps before the change are the uninterrupted ZeRO-2 run's
        assert rows[:STOP] == step_rows(runs["reference"])[:STOP]
