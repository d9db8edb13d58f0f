"""The saved 7B LoRA resume results (docs/results) and the docs/benchmarks.md sections that quote
them, for the per-session unit tests that hold one to the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.test_lora_7b import KEYS

DOCS = Path(__file__).resolve().parents[3] / "docs"
# the UTC day each session's files are named by, and the machine kind
DAYS = {34: "2026-11-26", 35: "2026-11-27", 47: "2026-11-28", 48: "2026-11-29"}
MACHINES = {34: "h100x2", 35: "h100x2", 47: "h200", 48: "h200"}


def load(kind: str, session: int) -> Any:
    """One run's JSON: kind is reference, second, resumed or cold."""
    name = f"{DAYS[session]}-7b-lora-resume-{kind}-{MACHINES[session]}-session{session}.json"
    return json.loads((DOCS / "results" / name).read_text())


def steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compared keys of each step's row."""
    return [{k: r.get(k) for k in KEYS} for r in rows]


def docs_section(heading: str) -> str:
    """docs/benchmarks.md from ``heading`` to the next level-2 heading, its whitespace collapsed
    so that a quoted figure matches wherever the markdown wraps it."""
    text = (DOCS / "benchmarks.md").read_text()
    start = text.index(heading)
    return " ".join(text[start:text.index("\n## ", start)].split())
