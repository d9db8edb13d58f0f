"""`hpc-grpo export`: a checkpoint becomes a checked Hugging Face folder, or nothing at all.

Everything is written into a hidden folder beside the target (``.NAME.partial-<pid>``): the
runtime child writes weights and tokenizer there and checks them, this side adds the model card
and the reward curve, and only then is the folder renamed to the target (one rename, on the
same file system). A failed check, a failed child, Ctrl-C or SIGTERM remove the hidden folder;
a SIGKILL leaves it, hidden, and the next export to the same target removes it once its process
is gone. A finished export is one line of the run's exports.jsonl (what `status` shows).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.export import best as best_of
from hpc_grpo.export import card, child, plan
from hpc_grpo.export.push import Pushed
from hpc_grpo.export.side_job import ExportJob
from hpc_grpo.rundir import ledgers, read_jsonl
from hpc_grpo.rundir.checkpoints import free_bytes_or_none
from hpc_grpo.rundir.contract import METRICS_JSONL, REWARD_CURVE, RUN_JSON, RunRecord
from hpc_grpo.rundir.ledgers import ExportLine
from hpc_grpo.rundir.workspace import Workspace, alive
from hpc_grpo.runs import runfiles

MODULE = "hpc_grpo.runtime.posttrain.export"


@dataclass(frozen=True)
class Exported:
    """A finished export, or (``error`` set) one that ran and failed: its check or the runtime
    child; nothing was left behind and the CLI exits 1 (bad input is a UserError, exit 2)."""

    plan: plan.ExportPlan
    check: dict[str, Any]
    notes: tuple[str, ...]
    error: str = ""
    best: best_of.Best | None = None  # --best: the step picked and its value
    reused: bool = False  # --push: a finished export already at the target, not written again
    pushed: Pushed | None = None  # --push: its error is set when the hub refused
    job: ExportJob | None = None  # run as a job (export/side_job.py): nothing written here yet


def _partial_prefix(target: Path) -> str:
    return f".{target.name}.partial-"


def clear_stale(target: Path) -> list[Path]:
    """Remove hidden partial folders of this target whose export process is gone (killed)."""
    gone = []
    for path in target.parent.glob(_partial_prefix(target) + "*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while exporting, so the cleanup below runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _add_card(the_plan: plan.ExportPlan, record: RunRecord, folder: Path,
              check: dict[str, Any]) -> None:
    curve = the_plan.run_dir / REWARD_CURVE
    if curve.is_file():
        shutil.copyfile(curve, folder / REWARD_CURVE)
    text = card.card_text(the_plan, record, read_jsonl(the_plan.run_dir / METRICS_JSONL), check,
                          curve.is_file())
    (folder / "README.md").write_text(text)


def share_as_run(folder: Path, run_dir: Path) -> None:
    """Give the exported folder the run directory's mode (the site's ``run_dir_mode``: 0700
    yours only, 0750 shared with your group) and every file in it that mode without execute
    bits, whether the folder is the run's export/ or a --to elsewhere: the export is the run's
    data, shared exactly as the run is. Before, transformers wrote the weights 0600 and the rest
    by the umask (0644): a group sharing a 0750 run could read its exported config but not its
    weights (issue #58)."""
    mode = run_dir.stat().st_mode & 0o777
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(mode if path.is_dir() else mode & 0o666)
    folder.chmod(mode)


def _record(the_plan: plan.ExportPlan, check: dict[str, Any], best: best_of.Best | None) -> None:
    ledgers.append_export(the_plan.run_dir, ExportLine(
        time=time.time(), step=the_plan.step, path=str(the_plan.target), layout=the_plan.layout,
        mode=the_plan.mode, dtype=the_plan.written_dtype, check=check,
        best_key=best.key if best else "", best_value=best.value if best else None))


def export(run_dir: Path, step: int | None = None, to: str | None = None,
           dtype: str | None = None, adapter: bool = False, python: str = sys.executable,
           announce: Callable[[str], None] | None = None, best: str | None = None) -> Exported:
    """Plan, refuse (UserError), write and check in a child, card, rename, record;
    ``announce`` gets the plan's line before the work starts. ``best``: the complete checkpoint
    whose step logged the highest value of that metrics key (export/best.py), not ``step``."""
    refuse_missing(run_dir)
    record = runfiles.read_run_record(run_dir, "exported")
    picked = best_of.pick(run_dir, record.run_id or run_dir.name, step, best)
    step = picked.step if picked else step
    the_plan = plan.build(run_dir, record, step, to, dtype, adapter)
    plan.refuse_space(the_plan, free_bytes_or_none(the_plan.target.parent))
    if announce:
        if picked:
            announce(picked.line())
        announce(the_plan.line())
        if note := plan.memory_note(the_plan.host_bytes, plan.available_memory()):
            announce(f"warning: {note}")
    target = the_plan.target
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(target)
    partial = target.parent / f"{_partial_prefix(target)}{os.getpid()}"
    partial.mkdir()
    try:
        with terminate_as_interrupt():
            answer = child.run(python, MODULE, the_plan.request(partial), "export",
                               Workspace.of_run(run_dir, record.model_load.hf_home))
            check = dict(answer.get("check") or {})
            if not answer.get("ok"):
                return Exported(the_plan, check, (), f"export of checkpoint-{the_plan.step} "
                                f"failed: {answer.get('error', 'no reason given')}; nothing was "
                                "written")
            _add_card(the_plan, record, partial, check)
            share_as_run(partial, run_dir)
            if target.exists():
                target.rmdir()  # empty (plan.refuse_target): replaced by the finished folder
            partial.rename(target)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    _record(the_plan, check, picked)
    return Exported(the_plan, check, tuple(str(n) for n in answer.get("notes") or ()), best=picked)


def refuse_missing(run_dir: Path) -> None:
    if not (run_dir / RUN_JSON).is_file():
        raise UserError(f"{run_dir} is not a run directory (no {RUN_JSON})", field="run",
                        hint="name a run by its id or folder: `hpc-grpo status` lists them")
