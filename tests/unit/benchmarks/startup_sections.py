"""What a dated section of docs/benchmarks.md says about one attempt's start-up (rank 0's
startup.jsonl line) and a sandbox restart's timeline, held to the saved JSON: shared by the
sessions' GPU tests."""

from __future__ import annotations

from typing import Any

TRAINER_WORDS = (("trainer_import", "trainer import"), ("model_load", "model load"),
                 ("engine_start", "engine start"), ("checks_and_inputs", "checks and inputs"),
                 ("heap_freeze", "heap freeze"))


def assert_startup_parts(section: str, startup: dict[str, Any], engine: str = "engine start") -> None:
    """The parts and the trainer part's timed stretches, as "<words> <seconds, 1 decimal>";
    ``engine``: how the section words the engine start (bold where it stands out)."""
    parts, trainer = startup["parts_s"], startup["trainer_parts_s"]
    assert f"torch and the process group {parts['torch_and_group']:.1f} s" in section
    assert f"preparing and loading {parts['prepare_and_load']:.1f} s" in section
    assert f"the first step {parts['first_step']:.1f} s" in section
    assert f"the trainer {parts['trainer']:.1f} s" in section
    for key, words in TRAINER_WORDS:
        words = engine if key == "engine_start" else words
        assert f"{words} {trainer[key]:.1f}" in section, key


def restart_timeline(signal: float, metrics: list[dict[str, Any]], run_files: dict[str, Any],
                     startup: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds from the test's signal (after step 2) to each mark of the two-node sandbox
    restart: step 3's end, the requeue, the new job's start, its rank 0 process, the restart
    record and the first new step's end."""
    steps = {m["step"]: m["time"] for m in metrics}
    return {"step3": steps[3] - signal, "requeued": run_files["first_attempt_requeued_at"] - signal,
            "started": run_files["new_attempt_pickle_loaded_at"] - signal,
            "process": startup[1]["process_start"] - signal,
            "record": restarts[0]["time"] - signal, "first_new": steps[4] - signal}
