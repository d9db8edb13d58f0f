"""The run's summary (summary.json, and the line `submit` prints when a followed run ends) has
the measured steady s/step beside the plan's prediction (issue #58)."""

from __future__ import annotations

import json
from pathlib import Path

from hpc_grpo.runtime.rank.observe.summary import write_summary


def test_the_summary_has_the_steady_step_beside_the_prediction(tmp_path: Path) -> None:
    lines = [{"step": s, "reward_mean": 0.1, "step_time": t}
             for s, t in enumerate([5.0, 1.0, 1.0, 6.0, 1.0, 1.0], 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    # the attempt that resumed from checkpoint-3 paid its own first step (step 4); only that
    # attempt's steps count (run.json's shape is the newest attempt's)
    (tmp_path / "restarts.jsonl").write_text(json.dumps({"resumed_from_step": 3}) + "\n")
    summary = write_summary(tmp_path, {"run_id": "r"}, predicted=1.25)
    assert (summary["steady_step_time_s"], summary["steady_steps"]) == (1.0, "median of 2 steps, 5-6")
    assert summary["step_time"] == ("step time: 1.00 s measured (median of 2 steps, 5-6) against "
                                    "1.25 predicted (-20%)")
    assert json.loads((tmp_path / "summary.json").read_text())["predicted_step_time_s"] == 1.25
