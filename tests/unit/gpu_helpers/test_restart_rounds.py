"""The 7B warm/cold restart comparison over several rounds (tests/gpu/test_resume_7b.py): the
rounds each restart keeps, and the goal held on their means. No GPU: the saved results are
written here as the GPU tests write them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu import resume_7b_helpers as seven_b
from tests.gpu.multinode_helpers import _forget, _save


def _restarted(results: Path, cache: str, seconds: float) -> None:
    """One restart's saved result, as ``_restart`` saves it (single file and its round)."""
    result = {"attempt": {"first_new_step_s": seconds, "started": 1.0}, "sync_s": 0.1,
              "equal_to_second_run": True, "startup": []}
    _save(f"7b-resume-{cache}", result)
    seven_b._add_round(f"7b-resume-{cache}-rounds", result)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HPC_GRPO_RESULTS", str(tmp_path))
    return tmp_path


def _verdict(results: Path) -> dict[str, object]:
    return json.loads((results / "7b-resume-restart-times.json").read_text())


def test_alternating_rounds_are_all_kept_and_compared_on_their_means(results: Path) -> None:
    for cache, seconds in (("warm", 52.9), ("cold", 101.5), ("warm", 43.1), ("cold", 96.5)):
        _restarted(results, cache, seconds)
    seven_b.check_warm_restart_at_most_half_the_cold_one()
    verdict = _verdict(results)
    assert verdict["warm_rounds"] == [52.9, 43.1] and verdict["cold_rounds"] == [101.5, 96.5]
    assert verdict["warm_over_cold"] == round(48.0 / 99.0, 3)
    assert verdict["worst_warm_over_best_cold"] == round(52.9 / 96.5, 3)


def test_a_slow_mean_fails_even_when_one_round_is_under_half(results: Path) -> None:
    for cache, seconds in (("warm", 60.0), ("cold", 101.5), ("warm", 43.1)):
        _restarted(results, cache, seconds)
    with pytest.raises(AssertionError):
        seven_b.check_warm_restart_at_most_half_the_cold_one()
    assert _verdict(results)["warm_over_cold"] == round(51.55 / 101.5, 3)  # 0.508


def test_without_rounds_the_single_results_are_compared(results: Path) -> None:
    """Results saved before the rounds existed (one file each) still give a verdict."""
    _save("7b-resume-cold", {"attempt": {"first_new_step_s": 100.0}})
    _save("7b-resume-resumed", {"attempt": {"first_new_step_s": 60.0}})
    with pytest.raises(AssertionError):
        seven_b.check_warm_restart_at_most_half_the_cold_one()
    verdict = _verdict(results)
    assert verdict["warm_from"] == "7b-resume-resumed" and verdict["warm_over_cold"] == 0.6


def test_a_new_stop_forgets_the_last_checkpoints_rounds(results: Path) -> None:
    """``-k stop`` writes a new checkpoint-2: the rounds of the previous one's restarts go, and
    only what runs after it counts."""
    for cache, seconds in (("warm", 80.0), ("cold", 100.0)):
        _restarted(results, cache, seconds)
    for cache in ("warm", "cold"):
        _forget(f"7b-resume-{cache}-rounds")
    for cache, seconds in (("warm", 40.0), ("cold", 100.0)):
        _restarted(results, cache, seconds)
    seven_b.check_warm_restart_at_most_half_the_cold_one()
    assert _verdict(results)["warm_rounds"] == [40.0]
