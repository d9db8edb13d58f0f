"""Helpers of the 7B resume GPU tests: a checkpoint's files, the restart rounds and the warm/cold
verdict (moved out of test_resume_7b.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.checkpoint_resume_helpers import (
    GIB,
    _folder_bytes,
)
from tests.gpu.multinode_helpers import _save, _saved


def _checkpoint(run_dir: Path) -> dict[str, Any]:
    """The newest checkpoint's size and the save's time as state.json recorded it."""
    state = json.loads((run_dir / "state.json").read_text())
    folders = sorted((run_dir / "checkpoints").glob("checkpoint-*"),
                     key=lambda p: int(p.name.split("-")[1]))
    if not folders:
        return {"bytes": 0, "state": state}
    size = _folder_bytes(folders[-1])
    seconds = state.get("checkpoint_seconds")
    return {"folder": folders[-1].name, "bytes": size, "gib": round(size / GIB, 2),
            "save_s": seconds, "gb_per_s": round(size / 1e9 / seconds, 2) if seconds else None,
            "files": {p.name: p.stat().st_size for p in folders[-1].rglob("*") if p.is_file()}}


def _add_round(name: str, result: dict[str, Any]) -> None:
    """Each restart's time kept beside the others of its kind (``-k warm_cache`` and ``-k
    cold_cache`` run in alternating rounds on one machine: session 42's single cold attempt and
    the warm one right after the stop's save left the comparison to one pair)."""
    rounds = (_saved(name) or {"rounds": []})["rounds"]
    row = {"first_new_step_s": result["attempt"]["first_new_step_s"],
           "started": result["attempt"]["started"], "sync_s": result["sync_s"],
           "equal_to_second_run": result["equal_to_second_run"], "startup": result["startup"]}
    _save(name, {"rounds": [*rounds, row]})


def check_warm_restart_at_most_half_the_cold_one() -> None:
    """The body of test_7b_warm_restart_at_most_half_the_cold_one, which the unit tests of its
    rounds (tests/unit/gpu_helpers) call on results they write."""
    cold = _times("7b-resume-cold")
    warm_from = "7b-resume-warm" if _times("7b-resume-warm") else "7b-resume-resumed"
    warm = _times(warm_from)
    assert cold and warm, "run -k cold_cache and -k warm_cache (or -k resume_equals) first"
    assert min(cold) > 0 and min(warm) > 0, (cold, warm)
    cold_s, warm_s = sum(cold) / len(cold), sum(warm) / len(warm)
    _save("7b-resume-restart-times", {
        "cold_s": round(cold_s, 1), "warm_s": round(warm_s, 1), "warm_from": warm_from,
        "cold_rounds": cold, "warm_rounds": warm, "warm_over_cold": round(warm_s / cold_s, 3),
        "worst_warm_over_best_cold": round(max(warm) / min(cold), 3)})
    assert warm_s <= 0.5 * cold_s, (warm, cold)


def _times(name: str) -> list[float]:
    """Every saved round's seconds to the first new step (one where only the single result
    was saved)."""
    rounds = (_saved(f"{name}-rounds") or {"rounds": []})["rounds"]
    if rounds:
        return [float(r["first_new_step_s"]) for r in rounds]
    single = _saved(name)
    return [float(single["attempt"]["first_new_step_s"])] if single else []
