"""The one way the launcher's commands make a rich console (status, follow, plan, doctor).

On a terminal rich fits its width. Off one (a pipe, a file, a CI or batch log) rich assumed 80
columns and folded every longer line: a printed ``wandb sync`` command or run directory came out
in two pieces that no longer paste (#58). There, nothing is wrapped: a width no line reaches, and
soft wrap for plain lines. ``COLUMNS`` in the environment still sets the width of tables.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

UNWRAPPED = 10_000  # columns off a terminal: wider than any line the commands print


def console(*, stderr: bool = False, **options: Any) -> Console:
    """A console on stdout (or ``stderr``) that wraps only on a terminal; ``options`` go to
    rich (``markup=False`` where the text is not rich markup). rich loads here, only to draw
    (start-up: ``--json`` never does)."""
    from rich.console import Console

    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    width = None if terminal or "COLUMNS" in os.environ else UNWRAPPED
    return Console(stderr=stderr, width=width, soft_wrap=not terminal, highlight=False, **options)
