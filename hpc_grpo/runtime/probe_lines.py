"""The probe report as short stdout lines, and back.

Why: srun merges every task's stdout and passes a line through whole only while it fits its I/O
buffer (about 1 KiB); a node report is longer, so two nodes' reports were cut into each other's
middle now and then (seen on the sandbox cluster: one doctor run in about ten found no report).
Each report therefore goes out in numbered chunks far below that size, tagged with a key unique
to the task, and is put back together from wherever the chunks landed."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

MARKER = "HPC_GRPO_PROBE "
CHUNK_CHARS = 200


def report_lines(report: Mapping[str, Any], key: str = "") -> list[str]:
    """``MARKER KEY I/N TEXT`` lines that together hold the report as JSON."""
    key = key or secrets.token_hex(6)
    text = json.dumps(report, sort_keys=True)
    chunks = [text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    return [f"{MARKER}{key} {i}/{len(chunks)} {chunk}" for i, chunk in enumerate(chunks)]


def read_reports(stdout: str) -> list[dict[str, Any]]:
    """Every whole report in merged output; lines of other programs, broken or missing chunks
    and a single-line report of an older probe (``MARKER {json}``) are all handled."""
    parts: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    reports: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        if not line.startswith(MARKER):
            continue
        rest = line[len(MARKER):]
        if rest.startswith("{"):
            _append_json(reports, rest)
            continue
        fields = rest.split(" ", 2)
        try:
            index, total = (int(n) for n in fields[1].split("/"))
        except (IndexError, ValueError):
            continue
        key = fields[0]
        parts.setdefault(key, {})[index] = fields[2] if len(fields) > 2 else ""
        totals[key] = total
    for key, chunks in parts.items():
        if sorted(chunks) == list(range(totals[key])):
            _append_json(reports, "".join(chunks[i] for i in range(totals[key])))
    return reports


def _append_json(reports: list[dict[str, Any]], text: str) -> None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return
    if isinstance(value, dict):
        reports.append(value)
