"""`hpc-grpo export` as a one-node job of the run's own back end, where the login node is too small.

The plan (export/plan.py) says how much host memory the export holds; when this machine has
less available on a Slurm site, or with ``--job``, the same command (``--here``, the step
pinned, the same flags) is written to ``export-job-<N>.sh`` in the run directory and started
through the run's back end (scheduler/backend.py ``submit_side_job``: sbatch with that memory
and the site profile's partition, account and QOS on Slurm, the command under its modules, env
and container, its time within max_time; a process of its own on the local back end).
export-jobs.jsonl records it; the job writes exports.jsonl (and pushes.jsonl) as the command does
anywhere, and `status` follows it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.config.site import SiteProfile, find_site, minutes
from hpc_grpo.errors import UserError
from hpc_grpo.export import plan
from hpc_grpo.rundir import ledgers, read_json_object
from hpc_grpo.rundir.contract import LOGS, SPEC_JSON, RunRecord
from hpc_grpo.rundir.hub import export_argv, push_args, visibility
from hpc_grpo.rundir.ledgers import ExportJobLine
from hpc_grpo.rundir.view import read_view
from hpc_grpo.scheduler.backend import SideJob, backend_for
from hpc_grpo.scheduler.jobscript import allocation_options, side_job_script

TIME_MIN = 120  # the job's time limit, at most the site's max_time: ZeRO-3 shards of 7B convert in minutes
MEM_MARGIN = 1.25  # over the plan's host memory (the model's tensors, the check's two models)
BASE_MEM_MB = 1536  # the process itself: Python, torch, transformers, tokenizer (measured ~1 GiB)


@dataclass(frozen=True)
class ExportJob:
    job_id: str
    reason: str
    script: Path
    log: Path


def reason_for(flag: bool | None, the_plan: plan.ExportPlan, scheduler: str,
               available: int | None) -> str:
    """Why the export runs as a job ("" here): --job, or a Slurm site's login node with less
    memory available than the export holds (a local site's job would run on this machine)."""
    if flag is not None:
        return "--job" if flag else ""
    here = backend_for(scheduler).follow_by_default  # its jobs run on this machine (local)
    if not here and available is not None and available < the_plan.host_bytes:
        return (f"the export holds about {plan.size(the_plan.host_bytes)} of host memory, "
                f"this machine has {plan.size(available)} available")
    return ""


def command(the_plan: plan.ExportPlan, python: str, *, to: str | None, dtype: str | None,
            push: str | None, private: bool | None) -> list[str]:
    """The job's `hpc-grpo export`: this plan's step and flags, run where the job runs."""
    flags = ["--step", str(the_plan.step), "--adapter" if the_plan.adapter else "--merge-lora"]
    flags += ["--to", str(the_plan.target)] if to else []
    flags += ["--dtype", plan.FLAGS[the_plan.dtype]] if dtype else []
    flags += push_args(push, private) if push else visibility(private)
    return export_argv(python, str(the_plan.run_dir), *flags)


def _site(run_dir: Path, site_name: str) -> tuple[SiteProfile, str]:
    """The run's site profile (spec.json's, else run.json's; an empty one, Slurm's defaults,
    where it is gone) and the partition its training asked for (spec.json's), else the site's."""

    saved = read_json_object(run_dir / SPEC_JSON)
    name = str(saved.get("site") or site_name)
    try:
        site = find_site(name) if name else SiteProfile(name="none")
    except UserError:  # the profile is gone
        site = SiteProfile(name=name)
    spec = saved.get("spec")
    asked = str(spec["partition"]) if isinstance(spec, dict) and spec.get("partition") else ""
    return site, asked or site.partition


def script_text(site: SiteProfile, run_dir: Path, argv: list[str], reason: str) -> str:
    """The job's script: the profile's env, then the command under its modules and container
    (scheduler/jobscript.py side_job_script)."""
    root = str(Path(__file__).resolve().parents[2])  # a checkout's package, as the node task's
    return side_job_script(site, run_dir, argv, "hpc-grpo export as a job: " + reason, root)


def submit(the_plan: plan.ExportPlan, record: RunRecord, argv: list[str],
           reason: str) -> ExportJob:
    """Write the script, start it through the run's back end with the site's flags, record it."""

    run_dir = the_plan.run_dir
    number = ledgers.next_export_job(run_dir)
    script = run_dir / f"export-job-{number}.sh"
    log = run_dir / LOGS / f"export-job-{number}.log"
    site, partition = _site(run_dir, record.site)
    partial = script.with_name(f".{script.name}.{os.getpid()}")
    partial.write_text(script_text(site, run_dir, argv, reason))
    partial.chmod(0o700)
    partial.rename(script)
    mem_mb = BASE_MEM_MB + math.ceil(the_plan.host_bytes * MEM_MARGIN / 2**20)
    scheduler = read_view(run_dir).scheduler  # the one notion of a local run
    name = f"export-{the_plan.run_id}"[:64]
    time_min = min(TIME_MIN, minutes(site.max_time, "max_time"))
    sub = backend_for(scheduler).submit_side_job(
        SideJob(script, log, name, mem_mb, time_min, tuple(allocation_options(site, partition))))
    ledgers.append_export_job(run_dir, ExportJobLine(
        job_id=sub.job_id, time=time.time(), scheduler=scheduler, script=str(script),
        log=str(log), step=the_plan.step, target=str(the_plan.target), mem_mb=mem_mb,
        reason=reason))
    return ExportJob(sub.job_id, reason, script, log)


def nodes_reach_hub(record: RunRecord) -> bool:
    """Whether the run's site says its nodes reach the hub (a job may push from there)."""

    try:
        return find_site(record.site).nodes_reach_hub
    except UserError:
        return False


def default_python(record: RunRecord, run_dir: Path) -> str:
    """The run's own interpreter (spec.json's: the site's), else this one."""

    python = read_json_object(run_dir / SPEC_JSON).get("python")
    return python if isinstance(python, str) and python else sys.executable
