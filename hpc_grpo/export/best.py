"""``--best KEY`` of `export` and `eval`: the complete checkpoint whose step logged the highest
value of a metrics.jsonl key (``reward_mean``, ``rewards/accuracy/mean``, ...).

A key may be given as metrics.jsonl names it or by a reward's name alone (``accuracy`` for
``rewards/accuracy/mean``). Higher is better: the flag is for rewards. A step logged twice (a
resumed attempt repeats the steps after its checkpoint; the ranks cut metrics.jsonl back, but an
older run may hold both) counts with its last line. Only steps with a complete checkpoint can
be picked; the one-line refusals name close keys, or the steps that were logged and saved.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.rundir import read_jsonl
from hpc_grpo.rundir.checkpoints import run_checkpoints
from hpc_grpo.rundir.contract import METRICS_JSONL

# Keys of a metrics line that are not a measure of the model (never offered as a close name).
_NOT_METRICS = {"step", "max_steps", "time"}
# --best maximises, so it takes rewards only: the highest loss, KL or length is not the best.
REWARD_PREFIXES = ("reward", "rewards/")


@dataclass(frozen=True)
class Best:
    key: str  # the metrics.jsonl key, as resolved
    step: int
    value: float
    candidates: int  # complete checkpoints with a value of the key
    logged_best: tuple[int, float] | None = None  # a higher logged step with no checkpoint

    def line(self) -> str:
        line = (f"best {self.key}: step {self.step} ({self.value:.4g}), the highest among "
                f"{self.candidates} complete checkpoint(s) with a logged value")
        if self.logged_best:
            step, value = self.logged_best
            line += (f"; step {step} logged more ({value:.4g}) but has no complete checkpoint "
                     "(save_steps decides which steps can be exported)")
        return line


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def numeric_keys(lines: list[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for line in lines:
        keys.update((k, None) for k, v in line.items()
                    if k not in _NOT_METRICS and _number(v) is not None)
    return list(keys)


def resolve_key(key: str, known: list[str]) -> str:
    """The metrics key meant: as given, or ``rewards/KEY/mean``; else a UserError naming the
    close keys (or all of them, when none is close)."""
    for candidate in (key, f"rewards/{key}/mean"):
        if candidate in known:
            return candidate
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    close += [k for k in known if key and key in k and k not in close][:3]
    hint = (f"did you mean {', '.join(close)}?" if close
            else f"keys logged: {', '.join(known[:12]) or 'none'}")
    raise UserError(f"metrics.jsonl has no key {key!r}", field="best", hint=hint)


def best_step(run_dir: Path, key: str, run_id: str) -> Best:
    """The complete checkpoint with the highest logged value of ``key`` (the earliest on a tie)."""
    lines = read_jsonl(run_dir / METRICS_JSONL)
    if not lines:
        raise UserError(f"run {run_id} has no metrics.jsonl lines to pick the best step from",
                        field="best", hint="pass --step N instead")
    resolved = resolve_key(key, numeric_keys(lines))
    if not resolved.startswith(REWARD_PREFIXES):
        raise UserError(f"--best takes a reward (it picks the highest value), not {resolved!r}",
                        field="best", hint="use reward_mean or rewards/NAME/mean, or --step N")
    by_step: dict[int, float] = {}
    for line in lines:
        step, value = line.get("step"), _number(line.get(resolved))
        if isinstance(step, int) and value is not None:
            by_step[step] = value  # the last line of a step wins
    complete = [c.step for c in run_checkpoints(run_dir) if c.complete]
    scored = [(by_step[s], s) for s in complete if s in by_step]
    if not scored:
        raise UserError(f"no complete checkpoint of run {run_id} is at a step that logged "
                        f"{resolved}", field="best",
                        hint=f"complete checkpoints: {', '.join(map(str, complete)) or 'none'}; "
                             f"steps with {resolved}: {_span(sorted(by_step))}")
    value, step = max(scored, key=lambda pair: (pair[0], -pair[1]))
    top_value, top_step = max(((v, s) for s, v in by_step.items()), key=lambda p: (p[0], -p[1]))
    higher = (top_step, top_value) if top_value > value else None
    return Best(resolved, step, value, len(scored), higher)


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]}" if len(steps) > 3 else ", ".join(map(str, steps))


def pick(run_dir: Path, run_id: str, step: int | None, key: str | None) -> Best | None:
    """``--best KEY``'s pick (None without it); with ``--step`` too, a UserError."""
    if not key:
        return None
    if step is not None:
        raise UserError("--step and --best both pick a checkpoint", field="best",
                        hint="pass one of them")
    return best_step(run_dir, key, run_id)
