"""What the resume tests share: the counting-prompts dataset, launching a run until it is done with
the test reward asking for a stop at given steps, and reading the prompts each step trained on
(tests/slow/resume_reward.py writes them) and what each step logged."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.slow.runtime_slow_helpers import metrics, node_cmd, node_env, state

STEP_KEYS = ("step", "reward_mean", "reward_std", "loss")


def counting_prompts(path: Path, count: int) -> dict[str, str]:
    """count prompts of 1, 2, ... numbers to count on (lengths differ, so do rewards): a run.json
    dataset block."""
    path.write_text("".join(json.dumps({"prompt": "Count on: " + " ".join(map(str, range(i, 2 * i + 2)))})
                            + "\n" for i in range(count)))
    return {"name": str(path), "prompt_column": "prompt", "split": "train"}


def run_with_stops(run_dir: Path, stops: Sequence[int], steps: int, timeout: float = 180,
                   between: Callable[[int], None] | None = None) -> None:
    """Launch the node task on run_dir until the run is done, stopping exactly at each of stops:
    every launch ends at its stop (the last at steps) and resumes from the previous stop's
    checkpoint. Each launch gets a free rendezvous port of its own; ``between`` is called with
    each stop's step before the next launch."""
    asked = {"HPC_GRPO_TEST_RUN_DIR": str(run_dir), "HPC_GRPO_TEST_STOP_AT": ",".join(map(str, stops))}
    for attempt, stop in enumerate((*stops, steps)):
        proc = subprocess.run(node_cmd(run_dir), env=node_env() | asked, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        st = state(run_dir)
        assert st["step"] == stop and st["phase"] == ("done" if stop == steps else "interrupted"), st
        assert st["resumed_from"] == (None if attempt == 0 else
                                      str(run_dir / "checkpoints" / f"checkpoint-{stops[attempt - 1]}"))
        if between is not None and stop != steps:
            between(stop)


def prompts_per_step(run_dir: Path, rank: int) -> list[tuple[int, list[Any]]]:
    path = run_dir / f"prompts-rank-{rank}.jsonl"
    return [(row["step"], row["prompts"]) for row in map(json.loads, path.read_text().splitlines())]


def step_rows(run_dir: Path) -> list[tuple[Any, ...]]:
    """(step, reward mean, reward std, loss) of every logged step: what an exact resume keeps."""
    return [tuple(row[k] for k in STEP_KEYS) for row in metrics(run_dir)]


def within_rounding(parts: Mapping[str, float], whole: float) -> bool:
    """The timed stretches inside a start-up part add up to no more than the part. startup.jsonl
    rounds each figure to 0.01 s, so their sum may pass the rounded whole by up to 0.005 s a
    figure (CI, session 42: 1.86 + 0.02 + 0.0 against 1.88)."""
    return sum(parts.values()) <= whole + 0.005 * (len(parts) + 1)


def adam_steps(checkpoint: Path) -> list[float]:
    """Adam's step count of every parameter group in a ZeRO checkpoint's first partition."""
    import torch

    (first, *_) = sorted(checkpoint.glob("global_step*/*rank_0_*optim_states.pt"))
    saved = torch.load(first, map_location="cpu", weights_only=False)["optimizer_state_dict"]
    inner = saved.get("base_optimizer_state") or saved["optimizer_state_dict"]  # ZeRO-1/2, 3
    return [float(entry["step"]) for entry in inner["state"].values()]
