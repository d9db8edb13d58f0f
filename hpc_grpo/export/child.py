"""Run one of the runtime's post-training modules in a child Python: the launcher never imports
torch. The request goes in as JSON on stdin; the answer comes back as a JSON file, so that
library output on stdout (DeepSpeed, transformers) cannot garble it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError

QUIET = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
         "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DS_ACCELERATOR": "cpu",
         "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def run(python: str, module: str, request: Mapping[str, Any], what: str,
        env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The child's answer; a child that could not run or wrote no answer is a UserError with
    the last line it printed. Interrupting the launcher kills the child (subprocess.run)."""
    full_env = {**QUIET, **os.environ, **(env or {})}
    with tempfile.TemporaryDirectory(prefix="hpc-grpo-child-") as tmp:
        answer = Path(tmp) / "answer.json"
        try:
            proc = subprocess.run([python, "-m", module, str(answer)], input=json.dumps(request),
                                  capture_output=True, text=True, env=full_env, check=False)
        except OSError as exc:
            raise UserError(f"{what}: cannot run {python}: {exc.strerror}", field="python",
                            hint="use an interpreter with hpc-grpo[runtime]") from exc
        if not answer.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"{what} failed: {last}", field="python",
                            hint="install the runtime extra: pip install 'hpc-grpo[runtime]'")
        data = json.loads(answer.read_text())
    return data if isinstance(data, dict) else {"ok": False, "error": "the answer is not an object"}
