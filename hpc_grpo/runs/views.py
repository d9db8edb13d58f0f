"""Terminal views: the status table, following a run with a progress bar, printing logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hpc_grpo.runs import registry, track


def _age(timestamp: float | None, now: float) -> str:
    if not timestamp:
        return "-"
    seconds = max(0, int(now - timestamp))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _state(row: track.RunStatus) -> str:
    """A preempted, requeued or completing job is on its way back, not finished: say so."""
    return f"{row.state} (not done)" if row.state in ("PREEMPTED", "REQUEUED", "COMPLETING") else row.state


def _requeues(row: track.RunStatus) -> str:
    """Count, then each restart's cause and the steps it lost: '2 (preempted -0, node failure -3)'."""
    if not row.requeues:
        return "0"
    causes = ", ".join(f"{r.get('cause')} -{r.get('steps_lost') or 0}" for r in row.restarts)
    return f"{row.requeues} ({causes})" if causes else str(row.requeues)


def status_table(rows: Sequence[track.RunStatus]) -> None:
    from rich.console import Console
    from rich.table import Table

    now = time.time()
    table = Table(box=None, header_style="bold")
    for column in ("run", "job", "state", "step", "reward", "tok/s", "ckpt", "ckpt age",
                   "requeues", "nodes"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.run_id, r.job_id or "-",
            _state(r),
            f"{r.step}/{r.max_steps}" if r.max_steps else str(r.step),
            f"{r.reward:.3f}" if r.reward is not None else "-",
            f"{r.tokens_per_s:.0f}" if r.tokens_per_s else "-",
            str(r.checkpoint_step) if r.checkpoint_step is not None else "-",
            _age(r.checkpoint_time, now), _requeues(r), r.nodes or "-",
        )
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table if rows else "no runs yet: hpc-grpo submit ...")


def watch_status(names: Sequence[str], interval: float = 5.0) -> None:
    try:
        while True:
            print("\033[2J\033[H", end="")
            status_table(track.status(names))
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


def follow(run_id: str, poll: float = 1.0) -> int:
    """Progress bar over metrics.jsonl until the job ends; exit code 0 only if training ended."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True)
    run_dir = registry.find_run(run_id)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), console=console) as progress:
        task = progress.add_task(run_id, total=None, info="starting")
        while True:
            row = track.status([run_id])[0]
            metrics = registry.last_jsonl(run_dir / "metrics.jsonl")
            info = row.state
            if metrics:
                info = (f"reward {metrics.get('reward_mean', 0):.3f}  "
                        f"{metrics.get('step_time', 0):.2f}s/step")
            progress.update(task, total=row.max_steps or None, completed=row.step, info=info)
            if row.finished:
                break
            time.sleep(poll)
    summary = registry.read_json(run_dir / "summary.json")
    if summary:
        console.print(
            f"reward {summary.get('reward_first_mean', 0):.3f} -> {summary.get('reward_last_mean', 0):.3f}"
            f" (change {summary.get('reward_delta', 0):+.3f}) over {summary.get('steps')} steps;"
            f" curve: {run_dir / 'reward_curve.png'}"
        )
    state = registry.read_json(run_dir / "state.json")
    console.print(f"run {run_id}: {row.state}, phase {state.get('phase', '-')}")
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
