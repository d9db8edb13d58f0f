"""Resume is exact in any epoch: a run stopped three times in its second and third epochs trains
on the same prompts, step by step, and logs the same rewards and losses as an uninterrupted one.

8 prompts, 2 ranks, 2 prompts a step: an epoch is 4 steps (1-4, 5-8, 9-12, 13-14). The stops
come at step 6 (inside epoch 2), 8 (the end of epoch 2: a resume at an epoch boundary) and 11
(inside epoch 3), each exactly there (the test reward asks for them), so no step is lost and
every step is trained once. About 50 s on 2 cores (80 s while they are shared): five launches.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.slow.resume_runs import (
    counting_prompts,
    prompts_per_step,
    run_with_stops,
    step_rows,
    within_rounding,
)
from tests.slow.runtime_slow_helpers import write_run

pytestmark = pytest.mark.slow
STEPS = 14
PROMPTS = 8
STOPS = (6, 8, 11)
REWARD = "tests.slow.resume_reward:prompt_length_recording"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(uninterrupted run, run stopped at STOPS and resumed after each stop).

    The stopped run also keeps one checkpoint (save_total_limit 1, a save every 3 steps: 3, 6,
    9, 12 besides the stops), and after each stop a partial folder is planted beside the stop's
    checkpoint (``_plant_partial``): every test below then holds with retention at its tightest
    and a killed save about, in one run of four launches instead of two such runs."""
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("epochs")
    model = build_tiny_model(root / "model", seed=0)
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)
    reference, stopped = root / "reference", root / "stopped"
    write_run(reference, model, steps=STEPS, reward_funcs=[REWARD], dataset=dataset)
    run_with_stops(reference, (), STEPS, timeout=120)
    grpo = json.loads((reference / "run.json").read_text())["grpo_config"]
    write_run(stopped, model, steps=STEPS, reward_funcs=[REWARD], dataset=dataset,
              grpo_config={**grpo, "save_steps": 3, "save_total_limit": 1})
    run_with_stops(stopped, STOPS, STEPS, timeout=120,
                   between=lambda stop: _plant_partial(stopped, stop))
    return reference, stopped


def test_same_prompts_every_step(runs: tuple[Path, Path]) -> None:
    reference, stopped = runs
    ref = {rank: prompts_per_step(reference, rank) for rank in (0, 1)}
    for rank in (0, 1):
        assert [step for step, _ in ref[rank]] == list(range(1, STEPS + 1))
        assert all(len(set(p)) == 1 for _, p in ref[rank])  # one prompt, num_generations times
    # each full epoch is a permutation of the dataset (and not the same one every epoch)
    seen = [[ref[rank][step][1][0] for step in range(STEPS) for rank in (0, 1)][i:i + PROMPTS]
            for i in range(0, 3 * PROMPTS, PROMPTS)]
    assert all(len(set(epoch)) == PROMPTS for epoch in seen) and len({tuple(e) for e in seen}) > 1
    for rank in (0, 1):
        assert prompts_per_step(stopped, rank) == ref[rank], f"rank {rank}: data order differs"


def test_same_rewards_and_losses_every_step(runs: tuple[Path, Path]) -> None:
    reference, stopped = runs
    ref, got = step_rows(reference), step_rows(stopped)
    assert [r[0] for r in ref] == list(range(1, STEPS + 1))
    differ = [g[0] for g, r in zip(got, ref, strict=True) if g != r]
    assert not differ, f"steps {differ} differ from the uninterrupted run"
    restarts = [json.loads(x) for x in (stopped / "restarts.jsonl").read_text().splitlines()]
    assert [(r["stopped_at_step"], r["resumed_from_step"], r["steps_lost"]) for r in restarts] == [
        (s, s, 0) for s in STOPS
    ]
    # the stops were stop-request files (resume_reward.py), not signals (issue #15)
    assert [r["cause"] for r in restarts] == ["stop request"] * len(STOPS)


def test_each_attempt_records_where_its_start_went(runs: tuple[Path, Path]) -> None:
    """startup.jsonl (runtime/rank/observe/startup_times.py): one line per attempt, each naming the step it
    resumed from, with every part of its time to the first step, in order and adding up."""
    from hpc_grpo.runtime.rank.observe.startup_times import PARTS

    reference, stopped = runs
    lines = {run: [json.loads(x) for x in (run / "startup.jsonl").read_text().splitlines()]
             for run in runs}
    assert [line["resumed_from_step"] for line in lines[reference]] == [None]
    assert [line["resumed_from_step"] for line in lines[stopped]] == [None, *STOPS]
    attempts = [json.loads(x)["attempt"] for x in (stopped / "restarts.jsonl").read_text().splitlines()]
    assert [line["attempt"] for line in lines[stopped]][1:] == attempts
    for line in lines[reference] + lines[stopped]:
        parts = line["parts_s"]
        assert set(parts) == set(PARTS) and all(v >= 0 for v in parts.values()), line
        assert abs(sum(parts.values()) - line["total_s"]) < 0.05, line
        assert parts["imports"] > 0 and parts["trainer"] > 0.5, line  # the kernel's start, TRL
        # inside the trainer part: TRL's model load timed (no engine without vLLM on CPU), and
        # the stretches before it: arguments, checks and inputs, TRL's trainer import, then the
        # heap freeze (one full collection: rounded to 0.01 s it may read 0.0)
        inner = line["trainer_parts_s"]
        assert set(inner) == {"model_load", "checks_and_inputs", "trainer_import", "heap_freeze",
                              "trainer_init_other", "resume_and_hooks", "runtime_imports"}, line
        assert all(v > 0 for k, v in inner.items() if k != "heap_freeze"), line
        assert inner["heap_freeze"] >= 0, line
        assert within_rounding(inner, parts["trainer"]), line
        # the split is complete: what has no name is the part's own marks, well under a second
        assert parts["trainer"] - sum(inner.values()) < 0.5, line
        # inside prepare and load: accelerate's prepare, and on a resume (no DeepSpeed here) the
        # model's weights and the optimizer read back
        loads = {"model_checkpoint_load", "optimizer_load"} if line["resumed_from_step"] else set()
        preparing = line["prepare_parts_s"]
        assert set(preparing) == {"accelerate_prepare"} | loads, line
        assert within_rounding(preparing, parts["prepare_and_load"]), line
    for rank in (0, 1):  # every attempt's imports frozen out of the collector's walks
        log = (stopped / "logs" / f"rank-{rank}.log").read_text()
        frozen = [int(x.split("imports done; ")[1].split()[0]) for x in log.splitlines()
                  if "objects frozen out of the collector's walks" in x]
        assert len(frozen) == 1 + len(STOPS) and min(frozen) > 100_000, frozen
    starts = [line["process_start"] for line in lines[stopped]]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)  # a new process each
    from hpc_grpo.runs import track

    (row,) = track.status([str(stopped)])  # what `hpc-grpo status` shows under the table
    assert row.startup.startswith(f"start-up (resumed from step {STOPS[-1]}): first step "), row


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*"))


def _plant_partial(run_dir: Path, stop: int) -> None:
    """What a save killed before its completion marker leaves: the stop's checkpoint files under
    the next step's name, without the marker. Retention must not count it (#29)."""
    assert _checkpoints(run_dir) == [f"checkpoint-{stop}"], _checkpoints(run_dir)  # limit 1
    src = run_dir / "checkpoints" / f"checkpoint-{stop}"
    partial = run_dir / "checkpoints" / f"checkpoint-{stop + 1}"
    shutil.copytree(src, partial)
    (partial / "hpc_grpo_complete.json").unlink()


def test_resume_is_exact_keeping_one_checkpoint_with_killed_saves_about(
        runs: tuple[Path, Path]) -> None:
    """The stopped run kept one checkpoint with a partial folder planted after each stop (the
    fixture): each stop left exactly its own complete checkpoint (``_plant_partial`` asserts it
    before planting), no partial folder was resumed from, the last one is gone after the next
    complete save, and the run still matches the uninterrupted one (the tests above)."""
    reference, stopped = runs
    assert _checkpoints(stopped) == [f"checkpoint-{STEPS}"]
    restarts = [json.loads(x) for x in (stopped / "restarts.jsonl").read_text().splitlines()]
    assert [r["resumed_from_step"] for r in restarts] == list(STOPS)  # never stop + 1
    assert step_rows(stopped) == step_rows(reference)
