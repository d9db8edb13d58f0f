"""#60 on the real sandbox cluster: a 4-node ZeRO-3 run (one rank a node) stopped, resumed on 2
nodes, stopped again and resumed back on 4, against an uninterrupted 4-node run.

16 prompts, num_generations 4, 4 completions a device: 4 x 1 trains 4 prompts (16 completions)
a step, an epoch is 4 steps. The run stops exactly at step 2 (the test reward writes the stop
request), resumes on 2 nodes (per-device 4 x accumulation 2: the same 16 completions a step),
stops at step 4, resumes on 4 nodes and trains to step 6, across the epoch boundary. Each resume
converts the ZeRO-3 shards once through DeepSpeed's universal checkpoint (rank 0 on one node,
the other nodes' ranks waiting) and the ranks that did not exist at the save start from a fresh
run's RNG. The reference is a DDP run: the data order does not depend on ZeRO (session 51 also
ran this test's DDP form, 4 -> 2 -> 4 without ZeRO, 3 passed in 109 s; CI keeps the ZeRO one,
which goes through the same resize and adds the conversion across nodes). Asserted from the run's
own records only: run.json, jobs.jsonl, restarts.jsonl, metrics.jsonl, status, the rank logs,
and the prompts the reward saw on each rank (tests/slow/resume_reward.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.clusterlib import cli, finished, submit, wait_for
from tests.slow.resume_runs import adam_steps, counting_prompts, prompts_per_step, step_rows

pytestmark = [pytest.mark.cluster, pytest.mark.whole_cluster,  # 4 nodes
              pytest.mark.usefixtures("sandbox_cluster")]
STEPS, STOPS, PROMPTS = 6, (2, 4), 16
TWO = ("resumed at 2 x 1 from 4 x 1, global batch 16 kept: per-device 4 x accumulation 2; "
       "ZeRO-3 shards converted from 4 to 2 ranks")
FOUR = ("resumed at 4 x 1 from 2 x 1, global batch 16 kept: per-device 4 x accumulation 1; "
        "ZeRO-3 shards converted from 2 to 4 ranks")


def _run(root: Path, run_id: str, stops: tuple[int, ...], patch: pytest.MonkeyPatch,
         *extra: str) -> Path:
    """Submit run_id at 4 nodes x 1 rank and follow it until its job ends."""
    run_dir = root / run_id
    patch.setenv("HPC_GRPO_TEST_RUN_DIR", str(run_dir))
    patch.setenv("HPC_GRPO_TEST_STOP_AT", ",".join(map(str, stops)))
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)["name"]
    run, _, got = submit(root, "--site", "sandbox", "--nodes", "4", "--procs-per-node", "1",
                         "--model", "builtin:tiny", "--dataset", dataset,
                         "--reward", "tests.slow.resume_reward:on_ranks_only", "--run-id", run_id,
                         "--set", f"max_steps={STEPS}", "--set", "per_device_train_batch_size=4",
                         "--set", "num_generations=4", "--set", "max_completion_length=16",
                         "--set", "learning_rate=0.01", "--set", "save_steps=1000", *extra)
    assert got == run_dir
    wait_for(run, finished, timeout=300)
    return run_dir


def _resume(run_dir: Path, nodes: int) -> str:
    proc = cli("resume", str(run_dir), "--nodes", str(nodes), "--no-wait", timeout=300)
    wait_for(str(run_dir), finished, timeout=300)
    return proc.stdout + proc.stderr


def _state(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "state.json").read_text()))


def _prompts(run_dir: Path, ranks: int) -> dict[int, list[Any]]:
    """Each step's prompts, rank after rank (the global batch in sampler order)."""
    out: dict[int, list[Any]] = {}
    for rank in range(ranks):
        if (run_dir / f"prompts-rank-{rank}.jsonl").exists():
            for step, prompts in prompts_per_step(run_dir, rank):
                out.setdefault(step, []).extend(prompts)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(uninterrupted 4 x 1 DDP run, the ZeRO-3 run resized 4 -> 2 -> 4, the resumes' output)."""
    root = tmp_path_factory.mktemp("resize")
    with pytest.MonkeyPatch.context() as patch:
        reference = _run(root, "reference", (), patch)
        assert _state(reference)["phase"] == "done", _state(reference)
        return (reference, *_resized(root, "resized", patch, "--zero-stage", "3"))


def _resized(root: Path, run_id: str, patch: pytest.MonkeyPatch, *extra: str) -> tuple[Path, list[str]]:
    resized = _run(root, run_id, STOPS, patch, *extra)
    assert (_state(resized)["phase"], _state(resized)["step"]) == ("interrupted", 2)
    said = [_resume(resized, 2)]
    assert (_state(resized)["phase"], _state(resized)["step"]) == ("interrupted", 4), said
    said.append(_resume(resized, 4))
    assert _state(resized)["phase"] == "done", said
    return resized, said


def test_each_change_keeps_the_global_batch_and_is_recorded(runs: tuple[Path, Path, list[str]]) -> None:
    reference, resized, said = runs
    assert TWO in said[0] and FOUR in said[1], said
    record = json.loads((resized / "run.json").read_text())
    assert record["world_size"] == 4 and record["nodes"] == 4, record
    grpo = record["grpo_config"]
    assert grpo["per_device_train_batch_size"] == 4
    assert grpo.get("gradient_accumulation_steps", 1) == 1
    jobs = [json.loads(x) for x in (resized / "jobs.jsonl").read_text().splitlines()]
    changes = [(j.get("layout_change"), j.get("resumed_from_step")) for j in jobs[1:]]
    assert changes == [(TWO, 2), (FOUR, 4)], jobs
    restarts = [json.loads(x) for x in (resized / "restarts.jsonl").read_text().splitlines()]
    assert [(r["stopped_at_step"], r["resumed_from_step"], r["steps_lost"]) for r in restarts] == \
        [(2, 2, 0), (4, 4, 0)], restarts
    shown = cli("status", str(resized)).stdout  # by folder: each test has its own index
    assert FOUR in shown, shown


def test_every_step_draws_the_uninterrupted_runs_prompts(runs: tuple[Path, Path, list[str]]) -> None:
    reference, resized, _ = runs
    ref, got = _prompts(reference, 4), _prompts(resized, 4)
    assert sorted(ref) == sorted(got) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert len(got[step]) == 16, (step, got[step])  # 16 completions a step throughout
        assert got[step] == ref[step], f"step {step}: the prompts differ"
    # ranks 2 and 3 trained steps 1-2 and 5-6 only: not while the run had 2 nodes
    assert [s for s, _ in prompts_per_step(resized, 3)] == [1, 2, 5, 6]
    epoch = {p for step in range(1, 5) for p in ref[step]}
    assert len(epoch) == PROMPTS  # steps 1-4 are one epoch: every prompt once


def test_the_shards_are_converted_and_new_ranks_seeded_fresh(runs: tuple[Path, Path, list[str]]) -> None:
    _, resized, _ = runs
    for step in STOPS:
        assert (resized / "checkpoints" / f"checkpoint-{step}" / f"global_step{step}_universal").is_dir()
    rank2 = (resized / "logs" / "rank-2.log").read_text()
    assert "RNG state: none for rank 2 in the checkpoint (saved by 2 rank(s)): seeded as a fresh " \
        "run's rank" in rank2  # rank 2 did not exist while the run had 2 nodes
    # the optimizer state was loaded at each size (a fresh one would count from 0), and ZeRO-3's
    # groups count once a step each (universal.py's repair of DeepSpeed's shared step tensor)
    for step in (*STOPS, STEPS):
        assert set(adam_steps(resized / "checkpoints" / f"checkpoint-{step}")) == {step}, step
    rank0 = (resized / "logs" / "rank-0.log").read_text()
    assert "Adam step count(s) shared with another group given" in rank0
    rows = step_rows(resized)
    assert [r[0] for r in rows] == list(range(1, STEPS + 1))
    assert all(math.isfinite(v) for row in rows for v in row[1:])
