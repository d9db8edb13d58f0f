"""Terminal views: the status table, following a run with a progress bar, printing logs."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from hpc_grpo.runs import terminal, track
from hpc_grpo.scheduler.jobstate import REQUEUING


def _age(timestamp: float | None, now: float) -> str:
    if not timestamp:
        return "-"
    seconds = max(0, int(now - timestamp))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _requeue_causes(row: track.RunStatus) -> str:
    """Each restart's cause and the steps it lost: 'preempted -0, node failure -3'."""
    return ", ".join(f"{r.get('cause')} (pending)" if r.get("pending")
                     else f"{r.get('cause')} -{r.get('steps_lost') or 0}" for r in row.restarts)


def _reward(value: float | None) -> str:
    """At most 8 characters: 3 decimals for usual rewards, fewer as they grow."""
    if value is None:
        return "-"
    if abs(value) < 1000:
        return f"{value:.3f}"
    return f"{value:.1f}" if abs(value) < 100_000 else f"{value:.2e}"


def _count(value: float | None) -> str:
    """A count in at most 5 characters (12345, 123k, 12.3M): tokens per second, huge steps."""
    if not value:
        return "-" if value is None or isinstance(value, float) else "0"
    if value < 100_000:
        return f"{value:.0f}"
    return f"{value / 1000:.0f}k" if value < 1_000_000 else f"{value / 1e6:.1f}M"


def _steps(step: int, max_steps: int) -> str:
    """"12/100"; huge counts shortened (123k/1.0M) so that the row keeps its 80 columns."""
    text = f"{step}/{max_steps}" if max_steps else str(step)
    if len(text) <= 11:
        return text
    return f"{_count(step)}/{_count(max_steps)}" if max_steps else _count(step)


def _notes(row: track.RunStatus) -> list[str]:
    """What does not fit a column: why a run failed, a state on its way back, restarts, a vLLM
    engine that may generate with stale weights, where the state came from and what is wrong in
    the run directory. One line each, under the table."""
    notes = []
    if row.requeuing:  # Slurm will restart it: not failed, whatever the last attempt wrote
        notes.append(row.requeuing)
    elif row.phase == "failed":  # e.g. "failed: configuration error: ValueError: ..."
        notes.append(": ".join(["failed", *(t for t in (row.cause, row.message) if t)]))
    if row.state in ("PREEMPTED", "REQUEUED", "COMPLETING") and not row.requeuing:  # not done
        notes.append(f"{row.state} (not done): {row.meaning}")
    if row.stalled:  # e.g. "stalled: no progress for 31s (bound 15s): rank 1 behind at step 2..."
        notes.append(f"stalled: {row.stalled}")
    if row.restarts:
        notes.append(f"requeues: {_requeue_causes(row)}")
    if row.resumed:  # hpc-grpo resume: the user brought it back, not a requeue
        notes.append(row.resumed)
    if row.startup and (row.restarts or row.resumed):  # what the last restart cost
        notes.append(row.startup)
    if row.layout_change:  # e.g. "resumed at 1 x 1 from 1 x 2, global batch 16 kept: ..."
        notes.append(row.layout_change)
    if row.attempt_nodes:  # e.g. "attempt 2 on 2 of 3 nodes (min_nodes 2: ...), attempt 3 on 3 of 3"
        notes.append(f"nodes: {row.attempt_nodes}")
    if row.drift:  # e.g. "vLLM drift: at step 7 ... differ ... by 0.412 on average (bound 0.1)..."
        notes.append(row.drift)
    if row.checkpoint_skipped:
        notes.append(row.checkpoint_skipped)
    if row.tracker_sync:  # W&B offline on nodes without internet: one command uploads it
        notes.append(f"W&B offline run; upload it with: {row.tracker_sync}")
    notes += [line for line in (row.export_job, row.exported, row.evaluated, row.pushed)
              if line]  # hpc-grpo export (as a job) / eval / export --push
    notes += [row.step_time] if row.step_time else []  # status RUN: measured and predicted s/step
    notes += [row.saves] if row.saves else []  # status RUN: each save's time against the plan's
    return notes


_SHORT = {"OUT_OF_MEMORY": "OOM"}  # squeue's own short code: the column stays 10 wide


def _mark(row: track.RunStatus) -> str:
    """A state Slurm did not give (from the run directory) carries a '*'. A run the hang
    watchdog stopped shows STALLED until it ends or its next attempt starts, also while its
    retry is due: the more telling of the two, and the REQUEUING line under the table says
    that Slurm will restart it (a requeue after a stall came up as REQUEUING before: CI, #58)."""
    state = REQUEUING if row.requeuing else _SHORT.get(row.state, row.state)
    state = "STALLED" if row.stalled and not row.finished else state
    return f"{state}*" if row.source == "run directory" else state


_COLUMNS = ("run", "job", "state", "step", "reward", "tok/s", "ckpt", "rq", "nodes")
_RUN_MIN = 8  # the run id folds down to this width; the node list folds only past that


def _cells(r: track.RunStatus, now: float, name: str = "") -> tuple[str, ...]:
    checkpoint = "-" if r.checkpoint_step is None else \
        f"{r.checkpoint_step} {_age(r.checkpoint_time, now)}"
    return (name or r.run_id, r.job_id or "-", _mark(r), _steps(r.step, r.max_steps), _reward(r.reward),
            _count(r.tokens_per_s), checkpoint, str(r.requeues), r.nodes or "-")


def _run_names(rows: Sequence[track.RunStatus]) -> list[str]:
    """The run column: the run id, or its whole directory where two runs share an id (the same
    id in two output roots looked like one run twice)."""
    seen = Counter(r.run_id for r in rows)
    return [r.run_dir if seen[r.run_id] > 1 else r.run_id for r in rows]


def status_table(rows: Sequence[track.RunStatus]) -> None:
    """One line per run in at most 80 columns for usual ids; everything longer goes below.

    Only the run id and the node list may fold onto more lines, the run id first: rich, left to
    itself, dropped the run column or cut the node list when a row did not fit."""
    from rich.table import Table  # start-up: rich loads only to draw (--json never does)

    now = time.time()
    console = terminal.console(markup=False)
    if not rows:
        console.print("no runs yet: hpc-grpo submit ...")
        return
    cells = [_cells(r, now, name) for r, name in zip(rows, _run_names(rows), strict=True)]
    widths = [max(len(c) for c in (name, *(row[i] for row in cells)))
              for i, name in enumerate(_COLUMNS)]
    left = console.width - sum(widths[1:-1]) - (len(_COLUMNS) - 1)  # for run and nodes
    run_min = min(widths[0], _RUN_MIN)
    nodes = min(widths[-1], max(5, left - run_min))
    run = max(run_min, min(widths[0], left - nodes))
    table = Table(box=None, header_style="bold", padding=(0, 1, 0, 0), pad_edge=False)
    for i, name in enumerate(_COLUMNS):
        folds = name in ("run", "nodes")
        table.add_column(name, no_wrap=not folds, overflow="fold",
                         width={"run": run, "nodes": nodes}.get(name, widths[i]))
    for row in cells:
        table.add_row(*row)
    console.print(table)
    for who, note in _grouped_notes(rows):
        console.print(f"{who}: {note}", soft_wrap=True)


def _grouped_notes(rows: Sequence[track.RunStatus]) -> list[tuple[str, str]]:
    """Each run's notes under the table; where the state came from (``note``: Slurm not
    answering, a job Slurm forgot) is said once for every run it is the same for, so a Slurm
    that does not answer is one line, not one per run."""
    out = [(row.run_id, note) for row in rows for note in _notes(row)]
    shared: dict[str, list[str]] = {}
    for row in rows:
        if row.note:
            shared.setdefault(row.note, []).append(row.run_id)
    if any(r.source == "run directory" for r in rows):
        shared.setdefault("state from the run directory: Slurm cannot speak for this run", ["*"])
    return out + [(ids[0] if len(ids) == 1 else f"{len(ids)} runs ({', '.join(ids[:3])}"
                   + (", ..." if len(ids) > 3 else "") + ")", note) for note, ids in shared.items()]


def watch_status(fetch: Callable[[], Sequence[track.RunStatus]], interval: float = 5.0) -> None:
    """Redraw the status table from ``fetch`` (the api's status) until interrupted."""
    try:
        while True:
            print("\033[2J\033[H", end="")
            status_table(fetch())
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


def follow(run_dir: Path, progress_of: Callable[[Path], track.FollowedRun], poll: float = 1.0) -> int:
    """Progress bar until the job ends, from ``progress_of`` (the api's progress); exit code 0
    only if training ended. ``run_dir``, not an id: an id may name a run in another root."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # only to draw

    console = terminal.console(stderr=True)
    now = progress_of(run_dir)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), console=console) as bar:
        task = bar.add_task(now.row.run_id, total=None, info="starting")
        while True:
            now = progress_of(run_dir)
            row, info = now.row, now.row.state
            if row.reward is not None:
                per_step = f"  {now.step_time:.2f}s/step" if now.step_time is not None else ""
                info = f"reward {row.reward:.3f}{per_step}"
            bar.update(task, total=row.max_steps or None, completed=row.step, info=info)
            if row.finished or row.state == "BROKEN":
                break
            time.sleep(poll)
    summary = now.summary
    if summary:
        console.print(
            f"reward {summary.get('reward_first_mean', 0):.3f} -> {summary.get('reward_last_mean', 0):.3f}"
            f" (change {summary.get('reward_delta', 0):+.3f}) over {summary.get('steps')} steps;"
            f" curve: {run_dir / 'reward_curve.png'}"
        )
        if summary.get("step_time"):  # measured steady s/step against the plan's
            console.print(summary["step_time"])
    if row.tracker_sync:
        console.print(f"W&B offline run; upload it with: {row.tracker_sync}")
    console.print(f"run {row.run_id}: {row.state}, phase {row.phase or '-'}")
    return 0 if row.state == "COMPLETED" else 1


def print_logs(paths: Sequence[Path], *, follow: bool) -> None:
    positions = {p: 0 for p in paths}
    while True:
        for path in paths:
            try:
                with path.open("rb") as handle:
                    handle.seek(positions[path])
                    data = handle.read()
                    positions[path] = handle.tell()
            except FileNotFoundError:
                continue
            if data:
                text = data.decode(errors="replace")
                prefix = f"[{path.stem}] "
                sys.stdout.write("".join(prefix + line for line in text.splitlines(True)))
                sys.stdout.flush()
        if not follow:
            return
        time.sleep(1.0)
