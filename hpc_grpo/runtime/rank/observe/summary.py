"""summary.json and reward_curve.png from metrics.jsonl: did the reward move, and how fast.

Works from the metrics file alone, so it covers every attempt of a resumed run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.steps import measured_line, steady_steps

WINDOW = 10


def per_step(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step (the last line wins), in step order."""
    by_step = {int(r["step"]): r for r in rows if "step" in r}
    return [by_step[s] for s in sorted(by_step)]


def summarize(rows: Sequence[dict[str, Any]], window: int = WINDOW,
              resumed_from: Sequence[int | None] = (), predicted: float | None = None) -> dict[str, Any]:
    """First-window vs last-window mean reward, the delta, steps and timing; the steady s/step
    (rundir/steps.py: each attempt's first step left out, ``resumed_from`` the steps attempts
    resumed from) beside the plan's ``predicted`` one."""
    steps = per_step(rows)
    steady = steady_steps(steps, resumed_from)
    rewards = [float(r["reward_mean"]) for r in steps if r.get("reward_mean") is not None]
    times = [float(r["step_time"]) for r in steps if r.get("step_time")]
    tps = [float(r["tokens_per_s"]) for r in steps if r.get("tokens_per_s")]
    window = max(1, min(window, len(rewards) // 2))  # short runs: two windows that don't overlap
    first = statistics.fmean(rewards[:window]) if rewards else None
    last = statistics.fmean(rewards[-window:]) if rewards else None
    return {
        "steps": len(steps),
        "last_step": int(steps[-1]["step"]) if steps else 0,
        "window": window,
        "reward_first_mean": first,
        "reward_last_mean": last,
        "reward_delta": (last - first) if first is not None and last is not None else None,
        "mean_step_time_s": statistics.fmean(times) if times else None,
        "median_step_time_s": statistics.median(times) if times else None,
        "steady_step_time_s": steady.seconds if steady else None,
        "steady_steps": steady.describe() if steady else None,
        "predicted_step_time_s": predicted,
        "step_time": measured_line(steady, predicted) if steady else None,
        "train_time_s": sum(times),
        "mean_tokens_per_s": statistics.fmean(tps) if tps else None,
        "first_time": steps[0].get("time") if steps else None,
        "last_time": steps[-1].get("time") if steps else None,
        "written": time.time(),
    }


def plot_curve(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> None:
    """Reward mean per step with a one-std band (Agg backend: no display on compute nodes)."""
    import matplotlib  # here: an optional package, imported where it is used

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # here: an optional package, imported where it is used

    steps = [r for r in per_step(rows) if r.get("reward_mean") is not None]
    x = [int(r["step"]) for r in steps]
    y = [float(r["reward_mean"]) for r in steps]
    sd = [float(r.get("reward_std") or 0.0) for r in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, label="reward mean")
    ax.fill_between(
        x,
        [a - b for a, b in zip(y, sd, strict=True)],
        [a + b for a, b in zip(y, sd, strict=True)],
        alpha=0.2,
        label="± std",
    )
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title or "GRPO reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_summary(run_dir: Path, extra: dict[str, Any] | None = None,
                  predicted: float | None = None) -> dict[str, Any]:
    """Write summary.json and reward_curve.png next to metrics.jsonl (rank 0); ``predicted``:
    the plan's s/step (run.json), shown beside the measured one."""
    rows = rundir.read_jsonl(run_dir / contract.METRICS_JSONL)
    resumed = [line.get("resumed_from_step") for line in
               rundir.read_jsonl(run_dir / contract.RESTARTS_JSONL)]
    summary = {**summarize(rows, resumed_from=resumed, predicted=predicted), **(extra or {})}
    rundir.write_json_atomic(run_dir / contract.SUMMARY_JSON, summary)
    if rows:
        try:
            plot_curve(rows, run_dir / contract.REWARD_CURVE, title=str(summary.get("run_id", "")))
        except ImportError as exc:  # a GPU image without matplotlib: the numbers still count
            print(f"[summary] no {contract.REWARD_CURVE}: {exc}", flush=True)
    return summary
