"""`hpc-grpo export --push ORG/NAME`: the checked export folder, uploaded to the Hugging Face hub.

The upload runs in a child Python (runtime/posttrain/hub_upload.py, ``huggingface_hub``'s
``create_repo`` + ``upload_folder``), after the export has been checked and renamed into place;
the token is huggingface_hub's own (``HF_TOKEN``, else its login file) and never passes through
hpc-grpo. A refused push (bad token, no write access, a conflicting commit) is one line and
leaves the export where it is; running the same command again pushes that folder without
exporting anew. A push is one line of the run's pushes.jsonl (what `status` shows).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.export import best as best_of
from hpc_grpo.export import child, layout, plan
from hpc_grpo.rundir import ledgers
from hpc_grpo.rundir.checkpoints import run_checkpoints
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.ledgers import ExportLine, PushLine
from hpc_grpo.rundir.workspace import Workspace

MODULE = "hpc_grpo.runtime.posttrain.hub_upload"
# The hub's repository names: [namespace/]name of letters, digits, '-', '_', '.' (without a
# namespace: the token's own user, as TRL's hub_model_id).
REPO_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


@dataclass(frozen=True)
class Pushed:
    repo_id: str
    url: str  # the commit's page
    commit: str
    error: str = ""  # set: the hub refused or the upload failed (the export stays)


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".git", ".")):
        raise UserError(f"not a hub repository name: {repo_id!r}", field="push",
                        hint="ORG/NAME (or NAME under your own user), e.g. my-org/qwen2.5-grpo")
    return repo_id


def require_hub(python: str) -> None:
    """huggingface_hub must be importable by the child: checked here when it is this Python."""
    if python == sys.executable and importlib.util.find_spec("huggingface_hub") is None:
        raise UserError("--push needs huggingface_hub, which is not installed", field="push",
                        hint="pip install 'hpc-grpo[hub]'")


def existing(run_dir: Path, record: RunRecord, step: int | None, best: str | None,
             to: str | None, adapter: bool) -> tuple[plan.ExportPlan, ExportLine] | None:
    """A finished export (exports.jsonl) at the target this export would write: pushed again
    as it is instead of being refused as a non-empty target. None where there is none."""
    run_id = record.run_id or run_dir.name
    picked = best_of.pick(run_dir, run_id, step, best)
    chosen = layout.pick(run_checkpoints(run_dir), picked.step if picked else step, run_id)
    target = plan.target_of(to, run_dir, chosen.step, adapter)
    for entry in reversed(ledgers.exports(run_dir)):
        if Path(entry.path) == target and entry.step == chosen.step:
            flag = plan.FLAGS.get(str(entry.dtype))
            return plan.build(run_dir, record, chosen.step, to, flag, adapter,
                              allow_existing=True), entry
    return None


def commit_text(the_plan: plan.ExportPlan, check: dict[str, Any]) -> tuple[str, str]:
    """The commit's summary and description: the run and step, the check's figure."""
    summary = f"hpc-grpo export of run {the_plan.run_id}, step {the_plan.step}"
    diff = check.get("max_abs_diff")
    checked = (f"checked: max |log p(export) - log p(checkpoint)| = {diff:.3g} (tolerance "
               f"{check.get('tolerance')})" if isinstance(diff, int | float) else "")
    description = (f"{the_plan.mode} weights ({the_plan.written_dtype}) of checkpoint-"
                   f"{the_plan.step} ({the_plan.layout} layout). {checked}").strip()
    return summary, description


def push(the_plan: plan.ExportPlan, check: dict[str, Any], repo_id: str, *,
         private: bool | None = None, python: str = sys.executable) -> Pushed:
    """Upload ``the_plan.target``; a refusal is ``Pushed.error`` (one line), not an exception:
    the export is done and stays."""
    summary, description = commit_text(the_plan, check)
    request = {"folder": str(the_plan.target), "repo_id": repo_id, "private": private,
               "revision": None, "commit_message": summary, "commit_description": description}
    answer = child.run(python, MODULE, request, "push", Workspace.of_run(the_plan.run_dir),
                       env={"HF_HUB_OFFLINE": "0"})
    if not answer.get("ok"):
        return Pushed(repo_id, "", "", f"push to {repo_id} failed: {answer.get('error')}; the "
                      f"export stays at {the_plan.target}")
    done = Pushed(repo_id, str(answer.get("url") or ""), str(answer.get("commit") or ""))
    ledgers.append_push(the_plan.run_dir, PushLine(
        repo_id=repo_id, time=time.time(), step=the_plan.step, path=str(the_plan.target),
        url=done.url, commit=done.commit))
    return done


