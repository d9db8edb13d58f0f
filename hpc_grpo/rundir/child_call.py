"""The child-Python protocol, the launcher's side: ``python -m MODULE ANSWER.json < request.json``.

The launcher never imports torch: what needs the training stack (an export, an evaluation, the
check of a job's rewards and prompts, a push) runs in a child Python, the site's interpreter.
The request goes in as JSON on stdin; the answer comes back as a JSON file, so that library
output on stdout and stderr (DeepSpeed, transformers) cannot garble it. The child's side is
``runtime/child_answer.py`` (``serve``). Stdlib only, like the rest of the run directory's room.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ChildOutcome:
    """What a child left: its answer (None: it wrote none, or could not be started) and, for
    the line that says why, its last line on stderr or the reason it could not run."""

    answer: dict[str, Any] | None
    why: str = ""
    started: bool = True


def call_child(python: str, module: str, request: Mapping[str, Any], *,
               env: Mapping[str, str], folder: Path | None = None,
               timeout: float | None = None) -> ChildOutcome:
    """Run ``module`` in ``python`` with ``request`` and ``env`` (its whole environment);
    interrupting the launcher kills the child. The answer file goes into ``folder`` (the
    caller's temporary folder), else into one made and removed here."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="hpc-grpo-child-") as tmp:
            return call_child(python, module, request, env=env, folder=Path(tmp), timeout=timeout)
    answer_path = folder / "answer.json"
    try:
        proc = subprocess.run([python, "-m", module, str(answer_path)], input=json.dumps(request),
                              capture_output=True, text=True, env=dict(env), timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ChildOutcome(None, f"cannot run {python}: {getattr(exc, 'strerror', None) or exc}",
                            started=False)
    if not answer_path.exists():
        return ChildOutcome(None, (proc.stderr.strip().splitlines() or ["no output"])[-1])
    data = json.loads(answer_path.read_text())
    return ChildOutcome(data if isinstance(data, dict)
                        else {"ok": False, "error": "the answer is not an object"})
