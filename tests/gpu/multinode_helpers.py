"""Where the GPU tests save and read their results (moved out of test_multinode.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _result_path(name: str) -> Path | None:
    """Where the result ``name`` is saved: HPC_GRPO_RESULTS/NAME.json, or nowhere when unset."""
    out = os.environ.get("HPC_GRPO_RESULTS")
    return Path(out) / f"{name}.json" if out else None


def _save(name: str, data: dict[str, Any]) -> None:
    path = _result_path(name)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, default=str))


def _forget(name: str) -> None:
    """A saved result removed (a later call must not read it as this loan's)."""
    path = _result_path(name)
    if path:
        path.unlink(missing_ok=True)


def _saved(name: str) -> dict[str, Any] | None:
    path = _result_path(name)
    return json.loads(path.read_text()) if path and path.exists() else None
