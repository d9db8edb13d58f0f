"""``--best KEY`` (export/best.py): the complete checkpoint whose step logged the highest value,
by metrics.jsonl name or a reward's short name; one-line refusals for an unknown key (close
names offered) and for no complete checkpoint at a logged step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.export import best, evaluate, write
from tests.unit.export import fakes
from tests.unit.export.export_fake import FAKE


def _metrics(run: Path, rows: list[dict[str, object]]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(tmp_path: Path) -> Path:
    run = fakes.run_dir(tmp_path)
    _metrics(run, [{"step": s, "reward_mean": v, "rewards/accuracy/mean": a, "loss": 0.1}
                   for s, v, a in [(1, 0.1, 0.0), (2, 0.9, 0.2), (3, 0.95, 0.1), (4, 0.5, 0.6),
                                   (5, 2.0, 0.0), (6, 0.4, 0.3)]])
    for step in (2, 4, 6):
        fakes.checkpoint(run, step)
    fakes.checkpoint(run, 5, complete=False)  # the best value, but its save was cut off
    return run


def test_the_best_complete_checkpoint_by_key_or_reward_name(tmp_path: Path) -> None:
    run = _run(tmp_path)
    picked = best.best_step(run, "reward_mean", "tiny-0001")
    assert (picked.step, picked.value, picked.candidates) == (2, 0.9, 3)
    assert picked.line() == ("best reward_mean: step 2 (0.9), the highest among 3 complete "
                             "checkpoint(s) with a logged value; step 5 logged more (2) but has "
                             "no complete checkpoint (save_steps decides which steps can be "
                             "exported)")
    by_name = best.best_step(run, "accuracy", "tiny-0001")
    assert (by_name.key, by_name.step, by_name.value) == ("rewards/accuracy/mean", 4, 0.6)
    assert by_name.logged_best is None and "logged more" not in by_name.line()


def test_best_takes_rewards_only(tmp_path: Path) -> None:
    """--best maximises: the highest loss (or KL, or length) is not the best checkpoint."""
    run = _run(tmp_path)
    with pytest.raises(UserError) as err:
        best.best_step(run, "loss", "tiny-0001")
    assert err.value.message == "--best takes a reward (it picks the highest value), not 'loss'"
    assert "reward_mean" in (err.value.hint or "")


def test_a_resumed_steps_last_line_counts(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with (run / "metrics.jsonl").open("a") as out:
        out.write(json.dumps({"step": 6, "reward_mean": 3.0}) + "\n")
    assert best.best_step(run, "reward_mean", "tiny-0001").step == 6


def test_an_unknown_key_names_the_close_ones(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(UserError) as err:
        best.best_step(run, "reward_men", "tiny-0001")
    assert err.value.message == "metrics.jsonl has no key 'reward_men'"
    assert "reward_mean" in (err.value.hint or "") and "\n" not in str(err.value)
    with pytest.raises(UserError) as err:
        best.best_step(run, "zzz", "tiny-0001")
    assert "keys logged: reward_mean, rewards/accuracy/mean, loss" in (err.value.hint or "")


def test_no_complete_checkpoint_at_a_logged_step_is_refused(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)  # metrics at steps 1..4
    fakes.checkpoint(run, 8)
    fakes.checkpoint(run, 3, complete=False)
    with pytest.raises(UserError) as err:
        best.best_step(run, "reward_mean", "tiny-0001")
    assert err.value.message == ("no complete checkpoint of run tiny-0001 is at a step that "
                                 "logged reward_mean")
    assert err.value.hint == "complete checkpoints: 8; steps with reward_mean: 1..4"


def test_step_and_best_together_are_refused(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(UserError, match="--step and --best"):
        best.pick(run, "tiny-0001", 4, "reward_mean")
    assert best.pick(run, "tiny-0001", 4, None) is None


def test_export_and_eval_take_the_best_step(tmp_path: Path) -> None:
    run = _run(tmp_path)
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    lines: list[str] = []
    done = write.export(run, python=str(fake), announce=lines.append, best="reward_mean")
    assert done.plan.step == 2 and done.best is not None and done.best.value == 0.9
    assert lines[0].startswith("best reward_mean: step 2 (0.9)")
    assert lines[1].startswith("export tiny-0001 checkpoint-2")
    entry = json.loads((run / "exports.jsonl").read_text().splitlines()[-1])
    assert entry["best"] == {"key": "reward_mean", "value": 0.9}
    subj, _ = evaluate.subject(str(run), None, lambda _: run, best="accuracy")
    assert subj.step == 4 and subj.label == "step-4" and subj.picked.startswith(
        "best rewards/accuracy/mean: step 4 (0.6)")
