"""The exported folder's README.md: a model card that says where the model came from.

Pure text from what the run directory holds: the run, the model it started from, the dataset
and rewards, the GRPO settings the user chose, the step, the reward history up to that step
(metrics.jsonl; reward_curve.png beside it where the run drew one) and the export's check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hpc_grpo.export.plan import ExportPlan
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runs import after_training

HISTORY_ROWS = 12
_SETTINGS = ("max_steps", "learning_rate", "per_device_train_batch_size", "num_generations",
             "max_completion_length", "beta", "temperature", "loss_type")


def history(metrics: Sequence[Mapping[str, Any]], step: int, rows: int = HISTORY_ROWS
            ) -> list[tuple[int, float]]:
    """(step, mean reward) up to ``step``: the first, the last and evenly spaced ones between."""
    points = [(int(m["step"]), float(m["reward_mean"])) for m in metrics
              if isinstance(m.get("step"), int) and isinstance(m.get("reward_mean"), int | float)
              and m["step"] <= step]
    if len(points) <= rows:
        return points
    picks = {round(i * (len(points) - 1) / (rows - 1)) for i in range(rows)}
    return [points[i] for i in sorted(picks)]


def _front_matter(plan: ExportPlan, record: RunRecord) -> list[str]:
    base = record.model
    lines = ["---", "library_name: " + ("peft" if plan.mode == "adapter" else "transformers"),
             "tags: [grpo, trl, hpc-grpo]"]
    if base:
        lines.append(f"base_model: {json.dumps(base)}")
    return [*lines, "---", ""]


def card_text(plan: ExportPlan, record: RunRecord, metrics: Sequence[Mapping[str, Any]],
              check: Mapping[str, Any], curve: bool) -> str:
    dataset, config = record.dataset, record.grpo_config
    what = {"full": "the trained weights", "merged": "the LoRA adapter merged into the base model",
            "adapter": "the LoRA adapter (load it on the base model with peft)"}[plan.mode]
    lines = [*_front_matter(plan, record),
             f"# {plan.run_id}, step {plan.step}", "",
             f"GRPO-trained with hpc-grpo (TRL GRPOTrainer): {what}, exported from "
             f"`checkpoint-{plan.step}` of run `{plan.run_id}` ({plan.layout} checkpoint layout) "
             f"in {plan.written_dtype}.", "",
             "| | |", "|---|---|",
             f"| run | `{plan.run_id}` (`{plan.run_dir}`) |",
             f"| base model | `{record.model}` |",
             f"| dataset | `{dataset.name}` split `{dataset.split}` |",
             f"| rewards | {', '.join(f'`{r}`' for r in record.reward_funcs) or '-'} |",
             f"| step | {plan.step} of {config.get('max_steps', '?')} |"]
    lines += [f"| {key} | {config[key]} |" for key in _SETTINGS if key in config and key != "max_steps"]
    points = history(metrics, plan.step)
    lines += ["", "## Reward history", ""]
    if points:
        lines += ["| step | mean reward |", "|---:|---:|", *(f"| {s} | {r:.4f} |" for s, r in points)]
    else:
        lines.append("No reward was logged up to this step (metrics.jsonl).")
    if curve:
        lines += ["", "![reward curve of the run](reward_curve.png)"]
    lines += ["", "## Check", "",
              "Log-probabilities of fixed texts (teacher forcing) and greedy continuations, this "
              "folder against the checkpoint's own model:", "",
              *(f"- {line}" for line in after_training.check_lines(check)), ""]
    return "\n".join(lines)
