"""The requeue signal's lead time follows the measured checkpoint time of the newest run of
the job's shape on the site."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hpc_grpo import api
from hpc_grpo.planner.timing import Timings, signal_lead
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runs import registry


def test_profile_lead_without_measurement() -> None:
    assert signal_lead(30, None)[0] == 30


def test_measured_checkpoint_extends_the_lead() -> None:
    lead, why = signal_lead(30, Timings(checkpoint_s=40.0, step_s=10.0, source_run="r-0001"))
    assert lead == 10 + 60 + 30
    assert "r-0001" in why and "checkpoint 40.0s" in why


def test_profile_lead_kept_when_it_covers_the_measurement() -> None:
    assert signal_lead(300, Timings(2.0, 1.0, "r"))[0] == 300


def _fake_run(root: Path, record: RunRecord, run_id: str, site: str, checkpoint_s: float,
              step_s: float) -> None:
    """A run of ``record``'s shape on ``site``: its warm-up step, two steady steps of ``step_s``
    and a save of ``checkpoint_s``."""
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    record = dataclasses.replace(record, run_id=run_id, run_dir=str(run_dir), site=site)
    (run_dir / "run.json").write_text(json.dumps(record.to_dict()))
    (run_dir / "state.json").write_text(json.dumps({"checkpoint_seconds": checkpoint_s}))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "step_time": t}) + "\n"
        for s, t in ((1, 3 * step_s), (2, step_s), (3, step_s))))
    registry.register(run_id, run_dir)


def test_render_uses_the_newest_measurement_and_warns(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    request = api.Request(site="sandbox", flags={"model": "builtin:tiny", "time": "3"},
                          output_root=str(root), python="/usr/bin/python3")
    record = api.prepare(request).plan.run_record("", "")  # the job's shape
    _fake_run(root, record, "grpo-tiny-0001", "sandbox", 5.0, 1.0)
    _fake_run(root, record, "grpo-tiny-0002", "sandbox", 200.0, 20.0)
    _fake_run(root, record, "grpo-tiny-0003", "other-site", 900.0, 1.0)
    prepared = api.prepare(request)
    assert "#SBATCH --signal=USR2@350" in prepared.script  # 20 + 1.5 * 200 + 30
    assert "grpo-tiny-0002" in prepared.summary
    assert any("shorter than one step" in w for w in prepared.plan.warnings)
