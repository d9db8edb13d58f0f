"""Resume is exact when one generation trains several steps (steps_per_generation > gradient
accumulation, num_iterations > 1): a stop between two steps of one generation resumes on the
completions that generation made, not on a new generation.

TRL generates every ``steps_per_generation × num_iterations`` micro-steps and keeps the result
in memory (``_buffered_inputs``); a checkpoint does not hold it. With steps_per_generation 4,
num_iterations 2 and gradient accumulation 2, one generation trains 8 micro-steps, optimizer
steps 1-4, the next 5-8 and so on, and every stop the test asks for (at a generation step: the
reward function asks for it) falls inside a block. 8 prompts, 2 ranks, 8 prompts a generation:
an epoch is 4 steps, so the stops at steps 5 and 9 are in the second and third epochs. About
60 s on 2 cores: four launches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slow.resume_runs import counting_prompts, prompts_per_step, run_with_stops
from tests.slow.runtime_slow_helpers import metrics, write_run

pytestmark = pytest.mark.slow
STEPS = 12
PROMPTS = 8
STOPS = (5, 9)
REWARD = "tests.slow.resume_reward:prompt_length_recording"
BLOCKS = {"steps_per_generation": 4, "num_iterations": 2, "gradient_accumulation_steps": 2}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(uninterrupted run, run stopped at STOPS and resumed after each stop)."""
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("blocks")
    model = build_tiny_model(root / "model", seed=0)
    dataset = counting_prompts(root / "prompts.jsonl", PROMPTS)
    out = []
    for name, stops in (("reference", ()), ("stopped", STOPS)):
        run_dir = root / name
        run = write_run(run_dir, model, steps=STEPS, reward_funcs=[REWARD], dataset=dataset)
        run["grpo_config"] |= BLOCKS
        (run_dir / "run.json").write_text(json.dumps(run, indent=2))
        run_with_stops(run_dir, stops, STEPS)
        out.append(run_dir)
    return out[0], out[1]


def test_generations_come_once_per_block(runs: tuple[Path, Path]) -> None:
    """The setting does what the test needs: one generation every 4 steps, in both runs (a
    resume that regenerated would add a generation at steps 2, 6 and 10)."""
    for run_dir in runs:
        for rank in (0, 1):
            assert [step for step, _ in prompts_per_step(run_dir, rank)] == [1, 5, 9]


def test_same_rewards_and_losses_every_step(runs: tuple[Path, Path]) -> None:
    reference, stopped = runs
    keys = ("step", "reward_mean", "reward_std", "loss")
    ref = [tuple(row.get(k) for k in keys) for row in metrics(reference)]
    got = [tuple(row.get(k) for k in keys) for row in metrics(stopped)]
    assert [r[0] for r in ref] == list(range(1, STEPS + 1))
    assert len({r[3] for r in ref}) > 1  # the losses move: equal lists say something
    differ = [g[0] for g, r in zip(got, ref, strict=True) if g != r]
    assert not differ, f"steps {differ} differ from the uninterrupted run"
    restarts = [json.loads(x) for x in (stopped / "restarts.jsonl").read_text().splitlines()]
    assert [(r["stopped_at_step"], r["resumed_from_step"], r["steps_lost"]) for r in restarts] == [
        (s, s, 0) for s in STOPS
    ]


def test_buffer_saved_only_inside_a_block(runs: tuple[Path, Path]) -> None:
    """Each stop's checkpoint holds every rank's buffer; the final one (step 12, the end of a
    block) needs none."""
    from hpc_grpo.runtime.rank.generation.buffer import FOLDER

    stopped = runs[1] / "checkpoints"
    for stop in STOPS:
        held = sorted(p.name for p in (stopped / f"checkpoint-{stop}" / FOLDER).iterdir())
        assert held == ["rank-0.pt", "rank-1.pt"]
    assert not (stopped / f"checkpoint-{STEPS}" / FOLDER).exists()


def test_each_resume_says_it_restored_the_buffer(runs: tuple[Path, Path]) -> None:
    for rank in (0, 1):
        log = (runs[1] / "logs" / f"rank-{rank}.log").read_text()
        restored = [line for line in log.splitlines() if "generation buffer of micro-step" in line]
        assert [line.split("micro-step ")[1].split()[0] for line in restored] == ["10", "18"]
