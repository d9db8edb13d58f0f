"""Run one of the runtime's post-training modules in a child Python: the launcher never imports
torch. The request goes in as JSON on stdin; the answer comes back as a JSON file, so that
library output on stdout (DeepSpeed, transformers) cannot garble it. Its temporary and cache
files (torch inductor's, the datasets' Arrow files, W&B's, matplotlib's) go where the ranks'
go: rundir/workspace.py's rule for the run's workspace, its temporary folder removed at the end.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.child_call import call_child
from hpc_grpo.rundir.workspace import Workspace, child_scratch

QUIET = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
         "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DS_ACCELERATOR": "cpu",
         "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def run(python: str, module: str, request: Mapping[str, Any], what: str, work: Workspace,
        env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The child's answer; a child that could not run or wrote no answer is a UserError with
    the last line it printed. Interrupting the launcher kills the child (subprocess.run).
    ``work``: the run's workspace (or a model folder's stand-in for one) its libraries write in."""
    inherited = {**QUIET, **os.environ, **(env or {})}
    with child_scratch(work, what, inherited) as (scratch, dirs):
        outcome = call_child(python, module, request, env={**inherited, **dirs}, folder=scratch)
    if not outcome.started:
        raise UserError(f"{what}: {outcome.why}", field="python",
                        hint="use an interpreter with hpc-grpo[runtime]")
    if outcome.answer is None:
        raise UserError(f"{what} failed: {outcome.why}", field="python",
                        hint="install the runtime extra: pip install 'hpc-grpo[runtime]'")
    return outcome.answer
