"""What a run directory says of what followed training, for `status` and the export room:
its exports, evaluations, pushes and export jobs, and the one line `status` shows of each.

exports.jsonl holds one line per finished export (export/write.py); eval/ one JSON file per
evaluation (export/evaluate.py); pushes.jsonl one line per push (export/push.py);
export-jobs.jsonl one line per `export --job` (export/side_job.py). Read without ever raising:
`status` over many runs must not stop at one odd file. A recorded export whose folder was
removed since is not offered. Here, below the export room, so that `status` never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import read_json_object, read_jsonl
from hpc_grpo.rundir.contract import EVAL_DIR, EXPORT_JOBS_JSONL, EXPORTS_JSONL, PUSHES_JSONL, RunRecord
from hpc_grpo.rundir.hub import push_command
from hpc_grpo.scheduler.backend import backend_for


def exports(run_dir: Path) -> list[dict[str, Any]]:
    """exports.jsonl's lines whose folder still exists, oldest first."""
    return [entry for entry in read_jsonl(run_dir / EXPORTS_JSONL)
            if isinstance(entry.get("path"), str) and Path(entry["path"]).is_dir()]


def newest_export(run_dir: Path) -> dict[str, Any] | None:
    """The export made last (what `status` shows), or None."""
    found = exports(run_dir)
    return found[-1] if found else None


def furthest_export(run_dir: Path) -> dict[str, Any] | None:
    """The export of the highest step, the last made among those (what `eval` takes), or None."""
    found = [e for e in exports(run_dir) if isinstance(e.get("step"), int)]
    return max(reversed(found), key=lambda e: int(e["step"])) if found else None


def newest_eval(run_dir: Path) -> dict[str, Any] | None:
    """The newest evaluation file of eval/ (by its recorded time), or None."""
    try:
        files = list((run_dir / EVAL_DIR).glob("*.json"))
    except OSError:
        return None
    found = []
    for path in files:
        data = read_json_object(path)
        if isinstance(data.get("time"), int | float) and isinstance(data.get("reward"), dict):
            found.append((float(data["time"]), str(path), data))
    return max(found)[2] if found else None


def check_lines(check: Mapping[str, Any]) -> list[str]:
    """The export's check, one line per engine that read the folder (transformers always, vLLM
    where the export ran with a GPU) or why vLLM did not, then what rounding to the dtype
    written does by itself (runtime/posttrain/check.py)."""
    lines, check = [], dict(check)
    for result in (check, _object(check, "vllm")):
        if isinstance(result.get("max_abs_diff"), int | float):
            lines.append(f"{result.get('engine', 'transformers')}: |log p(export) - log "
                         f"p(checkpoint's weights as written)| max {result['max_abs_diff']:.3g}, "
                         f"mean {float(result.get('mean_abs_diff', float('nan'))):.2g} over "
                         f"{result.get('tokens')} tokens of {result.get('texts')} texts; tolerance "
                         f"{float(result.get('tolerance', float('nan'))):g} on the "
                         f"{result.get('judged_on', 'max')}; greedy equal "
                         f"{result.get('greedy_equal')}/{result.get('texts')}")
    skipped = _object(check, "vllm").get("skipped")
    if skipped:
        lines.append(f"vLLM did not read the folder: {skipped}")
    rounding = _object(check, "rounding")
    merge = _object(rounding, "merge")
    if isinstance(merge.get("max_abs_diff"), int | float):
        tolerance = float(merge.get("tolerance", float("nan")))
        lines.append(f"{merge.get('engine')}: against the unmerged adapter max "
                     f"{merge['max_abs_diff']:.3g}, tolerance {tolerance:g}")
    if isinstance(rounding.get("max_abs_diff"), int | float):
        lines.append(f"{rounding.get('engine')} alone moves log p by max {rounding['max_abs_diff']:.3g}, "
                     f"mean {float(rounding.get('mean_abs_diff', float('nan'))):.2g} (reported, not "
                     f"judged); greedy equal {rounding.get('greedy_equal')}/{rounding.get('texts')}")
    return lines


def export_line(entry: dict[str, Any]) -> str:
    check = _object(entry, "check")
    diff = check.get("max_abs_diff")
    checked = f", checked (max |dlogp| {diff:.2g})" if isinstance(diff, int | float) else ""
    by_vllm = _object(check, "vllm").get("max_abs_diff")
    if checked and isinstance(by_vllm, int | float):
        checked = f", checked (max |dlogp| {diff:.2g}; vLLM {by_vllm:.2g})"
    return (f"exported step {entry.get('step')} ({entry.get('mode')}, {entry.get('dtype')})"
            f"{checked}: {entry.get('path')}")


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def eval_line(data: dict[str, Any]) -> str:
    reward, subject = _object(data, "reward"), _object(data, "subject")
    dataset = _object(data, "dataset").get("name", "?")
    try:
        half = (float(reward["high"]) - float(reward["low"])) / 2
        value = f"{float(reward['mean']):.4g} +- {half:.3g}"
    except (KeyError, TypeError, ValueError):
        value = "?"
    return (f"eval of {subject.get('label', '?')} on {dataset}: mean reward {value} "
            f"(95% CI, {data.get('prompts', '?')} prompts x {data.get('num_samples', '?')}, "
            f"{data.get('engine', '?')})")


def pushes(run_dir: Path) -> list[dict[str, Any]]:
    """pushes.jsonl's lines, oldest first (never raises)."""
    return [p for p in read_jsonl(run_dir / PUSHES_JSONL) if isinstance(p.get("repo_id"), str)]


def newest_push(run_dir: Path) -> dict[str, Any] | None:
    found = pushes(run_dir)
    return found[-1] if found else None


def push_line(entry: dict[str, Any]) -> str:
    return (f"pushed step {entry.get('step')} to {entry.get('repo_id')}"
            + (f" ({str(entry.get('commit'))[:12]})" if entry.get("commit") else ""))


def push_pending(run_dir: Path, record: RunRecord | None, phase: str) -> str:
    """`status`'s line for a run whose push after training has not happened ("" none): its
    training is done, run.json asks for a push, and pushes.jsonl has none to that repository."""
    hub = record.hub if record is not None else None
    if phase != "done" or record is None or hub is None or not hub.repo_id:
        return ""
    if any(p.get("repo_id") == hub.repo_id for p in pushes(run_dir)):
        return ""
    where = (" (the node task pushes after training; once its job has ended, see "
             "logs/hub-push.log)") if hub.on_node else ""
    return f"push pending{where}: {push_command(record.run_id or run_dir.name, hub)}"


# Slurm states of a side job that has not ended yet
WAITING = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}


def export_job_line(run_dir: Path) -> str:
    """The newest export job, one line ("" none): done once exports.jsonl has its export,
    else the back end's state of the job, and the log to read when it ended without one."""
    jobs = [j for j in read_jsonl(run_dir / EXPORT_JOBS_JSONL) if isinstance(j.get("job_id"), str)]
    if not jobs:
        return ""
    job = jobs[-1]
    head = f"export job {job['job_id']} (step {job.get('step')})"
    done = [e for e in exports(run_dir) if e.get("step") == job.get("step")
            and float(e.get("time") or 0) >= float(job.get("time") or 0)]
    if done:
        return f"{head}: done, {done[-1].get('path')}"
    try:
        state = backend_for(str(job.get("scheduler") or "slurm")).side_job_state(
            job["job_id"], Path(str(job.get("script"))))
    except Exception as exc:  # status never stops at one run: say what could not be asked
        state = f"UNKNOWN ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    if state in WAITING:
        return f"{head}: {state}"
    return f"{head}: {state}, no export recorded: see {job.get('log')}"
