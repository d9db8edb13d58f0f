"""What a dated section of docs/benchmarks.md says about one attempt's start-up (rank 0's
startup.jsonl line), held to that line: shared by the sessions' GPU tests."""

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
