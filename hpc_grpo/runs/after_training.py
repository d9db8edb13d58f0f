"""The one line `status` shows of each thing that followed training: the newest export (with
its check, which the model card lists too), evaluation, push or the push still pending, and
export job (its state asked of the run's back end).

They read the typed ledgers of rundir/ledgers.py and never raise: `status` over many runs must
not stop at one odd file. Here, below the export room, so that `status` never imports it; the
export room takes the same lines from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import ledgers
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hub import push_command
from hpc_grpo.rundir.ledgers import EvalResult, ExportLine, PushLine
from hpc_grpo.scheduler.backend import backend_for


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


def export_line(entry: ExportLine) -> str:
    check = entry.check
    diff = check.get("max_abs_diff")
    checked = f", checked (max |dlogp| {diff:.2g})" if isinstance(diff, int | float) else ""
    by_vllm = _object(check, "vllm").get("max_abs_diff")
    if checked and isinstance(by_vllm, int | float):
        checked = f", checked (max |dlogp| {diff:.2g}; vLLM {by_vllm:.2g})"
    return (f"exported step {entry.step} ({entry.mode}, {entry.dtype}){checked}: {entry.path}")


def _object(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _or_unknown(value: object) -> object:
    return "?" if value is None else value


def eval_line(result: EvalResult) -> str:
    value = "?"
    if None not in (result.reward_mean, result.reward_low, result.reward_high):
        half = (float(result.reward_high or 0) - float(result.reward_low or 0)) / 2
        value = f"{float(result.reward_mean or 0):.4g} +- {half:.3g}"
    return (f"eval of {_or_unknown(result.label)} on {_or_unknown(result.dataset)}: mean reward "
            f"{value} (95% CI, {_or_unknown(result.prompts)} prompts x "
            f"{_or_unknown(result.num_samples)}, {_or_unknown(result.engine)})")


def push_line(entry: PushLine) -> str:
    return (f"pushed step {entry.step} to {entry.repo_id}"
            + (f" ({entry.commit[:12]})" if entry.commit else ""))


def push_pending(run_dir: Path, record: RunRecord | None, phase: str) -> str:
    """`status`'s line for a run whose push after training has not happened ("" none): its
    training is done, run.json asks for a push, and pushes.jsonl has none to that repository."""
    hub = record.hub if record is not None else None
    if phase != "done" or record is None or hub is None or not hub.repo_id:
        return ""
    if any(p.repo_id == hub.repo_id for p in ledgers.pushes(run_dir)):
        return ""
    where = (" (the node task pushes after training; once its job has ended, see "
             "logs/hub-push.log)") if hub.on_node else ""
    return f"push pending{where}: {push_command(record.run_id or run_dir.name, hub)}"


# Slurm states of a side job that has not ended yet
WAITING = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}


def export_job_line(run_dir: Path) -> str:
    """The newest export job, one line ("" none): done once exports.jsonl has its export,
    else the back end's state of the job, and the log to read when it ended without one."""
    job = ledgers.newest_export_job(run_dir)
    if job is None:
        return ""
    head = f"export job {job.job_id} (step {job.step})"
    done = [e for e in ledgers.exports(run_dir) if e.step == job.step
            and (e.time or 0) >= (job.time or 0)]
    if done:
        return f"{head}: done, {done[-1].path}"
    try:
        state = backend_for(job.scheduler or "slurm").side_job_state(job.job_id,
                                                                       Path(str(job.script)))
    except Exception as exc:  # status never stops at one run: say what could not be asked
        state = f"UNKNOWN ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    if state in WAITING:
        return f"{head}: {state}"
    return f"{head}: {state}, no export recorded: see {job.log}"
