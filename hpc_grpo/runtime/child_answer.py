"""How the launcher runs torch work without importing torch: ``python -m MODULE ANSWER.json <
request.json`` in a child Python (the site's interpreter), a JSON request on stdin, a JSON
answer written to a file (stdout and stderr stay free for the libraries' own output).

``serve`` is that protocol's child side for the post-training commands (export, eval): an
exception becomes one line in the answer, ``{"ok": false, "error": ...}``, and exit code 1,
its traceback on stderr for whoever reads the child's log. Stdlib only.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.shared.setup_failure import exception_line


def serve(module: str, run: Callable[[dict[str, Any]], dict[str, Any]],
          argv: list[str] | None = None) -> int:
    """Read the request, ``run`` it, write the answer; 0 when it says ``ok``, 1 when not, 2 for
    a call without the answer file's path."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} ANSWER.json < request.json", file=sys.stderr)
        return 2
    request = json.load(sys.stdin)
    try:
        answer = run(request)
    except Exception as exc:  # one line for the launcher; the traceback stays on stderr
        traceback.print_exc()
        answer = {"ok": False, "error": exception_line(exc)}
    Path(args[0]).write_text(json.dumps(answer, indent=2) + "\n")
    return 0 if answer.get("ok") else 1
