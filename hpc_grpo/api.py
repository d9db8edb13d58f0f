"""The library behind the CLI: every command is one function here.

resolve inputs -> plan -> render -> submit, resume, the preflight side (doctor, site init,
stage) and the example model; the run side (status, logs, cancel, following a run) is
``api_runs``, which this module re-exports and the CLI's reading commands import alone, so that
``status`` never loads Jinja or the planner. The CLI is a thin layer over these functions; tests
and notebooks call them directly.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.api_runs import cancel as cancel  # the run side, also for the CLI's status
from hpc_grpo.api_runs import log_paths as log_paths
from hpc_grpo.api_runs import progress as progress
from hpc_grpo.api_runs import status as status
from hpc_grpo.config import names
from hpc_grpo.config.site import SiteListing, all_sites, find_site
from hpc_grpo.config.spec import JobSpec, build_spec, parse_set
from hpc_grpo.config.strict import read_yaml
from hpc_grpo.errors import UserError, UserErrors
from hpc_grpo.export.commands import evaluate as evaluate  # after training
from hpc_grpo.export.commands import export as export
from hpc_grpo.export.hub_step import notes as hub_notes
from hpc_grpo.export.hub_step import run_record
from hpc_grpo.planner import catalogue_names, min_nodes
from hpc_grpo.planner import resume as rules
from hpc_grpo.planner.checkpoint_fit import refuse_if_no_fit, resident_host_gib
from hpc_grpo.planner.job import JobPlan, build_plan
from hpc_grpo.planner.report import plan_report
from hpc_grpo.planner.save_time import refuse_slow_save
from hpc_grpo.preflight import doctor as checks
from hpc_grpo.preflight import inputs, local_site, siteinit
from hpc_grpo.preflight import stage as staging
from hpc_grpo.preflight.builtin_model import ensure_builtin_model
from hpc_grpo.preflight.builtin_model import example_model as example_model
from hpc_grpo.preflight.capacity import Capacity
from hpc_grpo.preflight.checked import check_inputs
from hpc_grpo.preflight.links import plan_links
from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.checkpoints import newest_complete_step
from hpc_grpo.rundir.contract import (
    ATTEMPTS,
    CHECKPOINTS,
    GENERATION_BUFFER,
    JOB_SBATCH,
    PLAN_TXT,
    RUN_JSON,
    SPEC_JSON,
    RunRecord,
)
from hpc_grpo.rundir.view import append_job_line
from hpc_grpo.runs import registry, runfiles, track
from hpc_grpo.runs.after_training import check_lines as check_lines  # the export check, as lines
from hpc_grpo.scheduler import envvars
from hpc_grpo.scheduler.backend import backend_for
from hpc_grpo.scheduler.render import render_script, summary_text


@dataclass(frozen=True)
class Request:
    """What the user asked for on the command line."""

    site: str = "local"
    recipe: str | None = None
    sets: tuple[str, ...] = ()
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run_id: str | None = None
    output_root: str | None = None
    python: str | None = None  # the interpreter the nodes run; default: the site's, else ours


@dataclass(frozen=True)
class Prepared:
    plan: JobPlan
    run_id: str
    run_dir: Path
    python: str
    script: str
    summary: str
    site_ref: str = ""  # how spec.json names the profile: its name, or its absolute path
    # Hub names not staged on a site whose nodes are offline: submit and resume refuse them.
    refused: tuple[UserError, ...] = ()
    machine: str = ""  # where a local site's GPU figures came from (preflight/local_site.py)

    @property
    def root(self) -> Path:
        return self.run_dir.parent

    def spec_text(self) -> str:
        """spec.json: the job spec and site the plan came from (as asked, without the plan's own
        choices), so that resume plans again."""
        spec = self.plan.requested or self.plan.spec
        return json.dumps({"site": self.site_ref or self.plan.site.name, "python": self.python,
                           "spec": spec.to_dict()}, indent=2) + "\n"


def load_spec(request: Request) -> tuple[local_site.SiteFacts, JobSpec]:
    """The site as it runs (a local one resolved from this machine) and the spec for it."""
    facts = local_site.site_facts(find_site(request.site))
    recipe = read_yaml(Path(request.recipe), "recipe") if request.recipe else {}
    if request.recipe and not recipe:  # a file not yet saved, or the wrong one: every key
        # defaulted and submit started a run nobody described, as an empty profile did (#58)
        raise UserError(f"recipe {request.recipe} is empty (no keys, or only comments)",
                        field="recipe", hint="write its keys (docs/recipe.md), or leave out "
                        "--recipe to run on the defaults")
    return facts, build_spec(recipe, parse_set(request.sets), request.flags, facts.site)


def site_ref(site: str) -> str:
    """A profile given as a path is recorded absolute: resume may run from another directory."""
    if site.endswith((".yaml", ".yml")) or "/" in site:
        return str(Path(site).expanduser().resolve())
    return site


def prepare(request: Request) -> Prepared:
    """Everything short of submitting: validated inputs, plan and the exact script.

    A given run id is checked first: it names the run directory, and one that is not a single
    directory name would put it outside the output root (or fail there with a traceback)."""
    if request.run_id is not None:
        names.check_run_id(request.run_id, "--run-id")
    facts, spec = load_spec(request)
    root = registry.output_root(request.output_root, facts.site.output_root)
    return _prepare(facts, spec, root=root, run_id=request.run_id, python=request.python,
                    site_name=site_ref(request.site))


def _prepare(facts: local_site.SiteFacts, spec: JobSpec, *, root: Path, run_id: str | None,
             python: str | None, site_name: str) -> Prepared:
    """inputs -> plan -> run directory -> script: each step a function of the one before."""
    site = facts.site
    python = python or site.python or sys.executable
    checked = check_inputs(site, spec, root=root, python=python, site_name=site_name)
    free = inputs.with_run_checkpoints(checked.free, root / run_id) if run_id else checked.free
    plan = build_plan(site, checked.spec, checked.model, free,
                      dataset_commit=checked.dataset_commit,
                      notes=facts.warnings + checked.notes + hub_notes(checked.spec, site),
                      links=checked.links, write=checked.write, measured=checked.measured)
    min_nodes.check(plan, lambda smaller: build_plan(  # every attempt's layout fits
        site, smaller, checked.model, free, checked.dataset_commit, links=checked.links))
    run_id = run_id or registry.next_run_id(root, plan.job_name)
    run_dir = root / run_id
    script = render_script(plan, run_id=run_id, run_dir=str(run_dir), python=python)
    return Prepared(plan, run_id, run_dir, python, script, summary_text(plan), site_name,
                    checked.refused + facts.refused, facts.source)


def _refuse_unstaged(prepared: Prepared) -> None:
    """Before anything is written or queued: the nodes could not load what is not staged."""
    if prepared.refused:
        raise UserErrors(prepared.refused) if len(prepared.refused) > 1 else prepared.refused[0]


@dataclass(frozen=True)
class Submitted:
    run_id: str
    run_dir: Path
    job_id: str
    warnings: tuple[str, ...]
    follow: bool = False  # the back end runs it here: `submit` follows it unless told not to


def submit(request: Request) -> Submitted:
    """Create the run directory atomically and submit it; either both happen or neither."""
    prepared = prepare(request)  # every check before anything is built or written
    _refuse_unstaged(prepared)
    backend_for(prepared.plan.site.scheduler).check(prepared.plan)
    if ensure_builtin_model(prepared.plan.spec.model, prepared.python):
        prepared = prepare(request)  # again, now that the model's architecture can be read
    plan = prepared.plan
    refuse_if_no_fit(plan.checkpoint_problem)
    refuse_slow_save(plan.save)
    claims = 20  # submits of one job racing for its next number: far more than a sweep's
    while True:
        try:
            with registry.create_run_dir(prepared.root, prepared.run_id, _run_files(prepared),
                                         mode=plan.site.dir_mode) as run_dir:
                job_id, known = _submit_job(prepared, run_dir)
                append_job_line(run_dir, job_id, "submitted", **known)
                registry.register(prepared.run_id, run_dir)
            return Submitted(prepared.run_id, run_dir, job_id, plan.warnings,
                             backend_for(plan.site.scheduler).follow_by_default)
        except registry.RunIdTaken:
            claims -= 1
            if request.run_id or not claims:  # the user's own name: theirs to change
                raise
            # Another submit of the job claimed the number meanwhile: the next, its script and
            # run.json written for it (both name the run directory).
            prepared = _renamed(prepared, registry.next_run_id(prepared.root, plan.job_name))


def _run_files(prepared: Prepared) -> dict[str, str]:
    """The launcher's files of a new run directory (run.json with push_to_hub's block)."""
    record = run_record(prepared.plan, prepared.run_id, str(prepared.run_dir))
    return {RUN_JSON: json.dumps(record.to_dict(), indent=2) + "\n", JOB_SBATCH: prepared.script,
            PLAN_TXT: prepared.summary, SPEC_JSON: prepared.spec_text()}


def _renamed(prepared: Prepared, run_id: str) -> Prepared:
    """The same plan under another run id: the script rendered again for its directory."""
    run_dir = prepared.root / run_id
    return dataclasses.replace(prepared, run_id=run_id, run_dir=run_dir, script=render_script(
        prepared.plan, run_id=run_id, run_dir=str(run_dir), python=prepared.python))


def _submit_job(prepared: Prepared, run_dir: Path) -> tuple[str, dict[str, str]]:
    """Submit the prepared script for ``run_dir`` through its site's back end; the job id and
    what tells the job apart."""
    plan = prepared.plan
    with envvars.exported(plan.site.secret_values):  # secrets reach the job, not its files
        job = backend_for(plan.site.scheduler).submit(script=prepared.script, run_dir=run_dir,
                                                      plan=plan, python=prepared.python)
    return job.job_id, dict(job.known)


@dataclass(frozen=True)
class Resumed:
    run_id: str
    run_dir: Path
    job_id: str
    previous_job_id: str
    from_step: int  # the checkpoint's step; 0: no complete checkpoint, training starts again
    warnings: tuple[str, ...]
    layout_change: str = ""  # planner/resume.py Resize.line(); "": the run's layout
    follow: bool = False  # the back end runs it here: `resume` follows it as `submit` does


def resume(name: str, sets: tuple[str, ...] = (), time: str | None = None,
           nodes: int | None = None, procs_per_node: int | None = None) -> Resumed:
    """Continue a run that ended unfinished as a new job in its own run directory.

    The ranks of any job resume from the newest complete checkpoint by themselves, so a resume
    is the run's spec planned again (with the allowed overrides), the script re-rendered and a
    new job submitted. Refused before anything is written or submitted: a run whose job is
    still alive, a finished run, an override a checkpoint cannot follow (planner/resume.py).
    Without a complete checkpoint training starts again from step 0, in the same directory.
    ``nodes`` and ``procs_per_node`` resume at another world size where ``rules.resize``
    allows it: the per-device batch and accumulation replanned to keep the global batch, the
    plan (memory included) made for the new layout, the change written to plan.txt and jobs.jsonl.
    """
    run_dir = registry.find_run(name)
    files = runfiles.read_run(run_dir)
    if files.problems:
        raise UserError(f"run {files.run_id} cannot be resumed: {files.problems[0]}", field="run",
                        hint="`hpc-grpo status` shows what is wrong with it")
    saved = rundir.read_json_object(run_dir / SPEC_JSON)
    if not isinstance(saved.get("spec"), dict) or not isinstance(saved.get("site"), str):
        raise UserError(f"run {files.run_id} has no {SPEC_JSON} (submitted by an older hpc-grpo)",
                        field="run", hint="submit a new run with the same recipe")
    track.refuse_if_alive(files)
    flags = {k: v for k, v in (("time", time), ("nodes", nodes),
                               ("procs_per_node", procs_per_node)) if v}
    facts = local_site.site_facts(find_site(saved["site"]))
    site = facts.site
    assert files.record is not None  # a record that cannot be read is one of files.problems
    asked = parse_set(sets)
    spec = rules.pinned_layout(build_spec(saved["spec"], asked, flags, site), files.record)
    spec, change = _resized(spec, files.record, asked)
    python = saved.get("python") if isinstance(saved.get("python"), str) else None
    prepared = _prepare(facts, spec, root=run_dir.parent, run_id=run_dir.name, python=python,
                        site_name=saved["site"])
    _refuse_unstaged(prepared)
    refuse_if_no_fit(prepared.plan.checkpoint_problem)
    refuse_slow_save(prepared.plan.save)
    record = reshard.with_conversion_time(run_record(prepared.plan, files.run_id, str(run_dir)),
                                          change.zero_stage if change else None)
    problems = rules.unchangeable(files.record, record)
    if problems:
        raise UserErrors(problems) if len(problems) > 1 else problems[0]
    from_step = newest_complete_step(run_dir) or 0
    buffered = run_dir / CHECKPOINTS / f"checkpoint-{from_step}" / GENERATION_BUFFER
    if change is not None and from_step and buffered.is_dir():
        raise rules.mid_generation(from_step, change)
    nothing = rules.left_to_train(phase=files.progress.phase, step=files.progress.step,
                                  checkpoint_step=from_step, max_steps=record.max_steps)
    if nothing is not None:
        raise nothing
    backend_for(site.scheduler).check(prepared.plan)
    previous = files.job_id
    files_now = {
        RUN_JSON: json.dumps(record.to_dict(), indent=2) + "\n",
        JOB_SBATCH: prepared.script,
        PLAN_TXT: prepared.summary + (f"{change.line()}\n" if change else ""),
        SPEC_JSON: prepared.spec_text(),
    }
    attempts = run_dir / ATTEMPTS
    number = len(list(attempts.iterdir())) + 1 if attempts.is_dir() else 1
    with registry.replace_run_files(run_dir, files_now, f"{number:02d}-job-{previous or 'none'}"):
        job_id, known = _submit_job(prepared, run_dir)
    moved = {"layout_change": change.line()} if change else {}
    append_job_line(run_dir, job_id, "submitted", **known, resumed_from_job=previous,
                    resumed_from_step=from_step, **moved)
    if not any(r.run_dir == run_dir for r in registry.indexed_runs()):
        registry.register(files.run_id, run_dir)
    return Resumed(files.run_id, run_dir, job_id, previous, from_step, prepared.plan.warnings,
                   change.line() if change else "", backend_for(site.scheduler).follow_by_default)


def _resized(spec: JobSpec, record: RunRecord,
             asked: Mapping[str, Any]) -> tuple[JobSpec, rules.Resize | None]:
    """The resume's spec at its layout: processes per node left to the site stay the run's,
    and at another world size the replanned batch split (``rules.resize``, refused there in
    one line) replaces the run's, except where ``--set`` names a value (``unchangeable``
    then compares it with the split)."""
    if not spec.procs_per_node:
        spec = dataclasses.replace(spec, procs_per_node=record.procs_per_node)
    change = rules.resize(record, spec.nodes, spec.procs_per_node)
    if change is None:
        return spec, None
    grpo = {**spec.grpo, **{k: v for k, v in change.grpo.items() if k not in asked}}
    return dataclasses.replace(spec, grpo=grpo), change


def stage(name: str, site_name: str, revision: str = "", dataset: bool = False) -> Any:
    """Download a hub model (catalogue names too) or dataset into the site's shared cache once,
    on the login node, and record its commit (``preflight.stage.Staged``)."""
    if not name.strip():  # as a path, "" is the current directory
        raise UserError("an empty name would mean the current directory", field="stage",
                        hint="give a hub id (Qwen/Qwen2.5-0.5B) or a catalogue name")
    site = find_site(site_name)
    if not dataset:
        model = inputs.resolve_model(name, registry.home_dir())
        if model.local:
            raise UserError(f"{name} is a local model: it needs no staging", field="stage",
                            hint="give its path to --model; the nodes must see the same path")
        name = model.source
    return staging.stage(site, name, revision=revision, kind="dataset" if dataset else "model")


def sites() -> SiteListing:
    """Every site profile by name, the user's hiding shipped ones of the same name, and those
    that do not load. Refused only when none loads: a broken profile nobody uses must not hide
    the good ones (`sites` lists them and a line for each broken one, exit 0)."""
    listing = all_sites()
    if not listing.loaded and listing.broken:
        problems = [UserError(problem) for _, problem in listing.broken.values()]
        raise UserErrors(problems) if len(problems) > 1 else problems[0]
    return listing


def sites_report(listing: SiteListing) -> list[dict[str, Any]]:
    """The profiles that load as plain data (``sites --json``), sorted by name."""
    return [dataclasses.asdict(profile) for profile in listing.loaded.values()]


def plan(request: Request) -> dict[str, Any]:
    """The plan a request gets (``plan``): what render and submit would use, and why; with
    the site's links (declared, measured by doctor, or assumed: ``preflight.links``)."""
    prepared = prepare(request)
    made = prepared.plan
    return {**plan_report(made), "links": plan_links(made.site), "machine": prepared.machine}


def model_names() -> list[str]:
    """The model shapes the planner knows without a config.json (``plan --list-models``)."""
    return list(catalogue_names())


def doctor(site_name: str, nodes: int | None, partition: str, output_root: str,
           timeout_s: int, model: str = "", *, bandwidth: bool = False,
           output_bandwidth: bool = False) -> Any:
    """A real preflight job on the site's nodes; with a model, its planned checkpoint and save
    memory are compared with each node's free output space and memory; with ``bandwidth``, a
    second job times the links and caches them for plan; with ``output_bandwidth``, one times
    the output root's writes (each rank its share of the model's planned checkpoint)."""
    profile = find_site(site_name)
    count = nodes or min(2, profile.max_nodes or 2)
    capacity = Capacity(cpu_memory_gib=profile.cpu_memory_gib)
    share = 0
    if model:
        plan = prepare(Request(site=site_name, flags={"model": model, "nodes": count},
                               output_root=output_root or None)).plan
        if plan.checkpoint is not None:
            capacity = Capacity(profile.cpu_memory_gib, plan.checkpoint.one,
                                plan.checkpoint.at_once,
                                resident_host_gib(plan.memory, plan.server_plan)
                                + plan.checkpoint.host_bytes / 2**30)
        if plan.save is not None:
            share = plan.save.node_bytes // plan.procs_per_node
    return checks.run(profile, nodes=count, partition=partition, output_root=output_root,
                      timeout_s=timeout_s, capacity=capacity, bandwidth=bandwidth,
                      output_bandwidth=output_bandwidth, bytes_per_rank=share)


def init_site(name: str, partition: str, output: str, force: bool,
              local: bool = False) -> tuple[Path, dict[str, Any]]:
    """Write a starting profile from the live cluster, or from this machine (``local``, or
    no Slurm here); returns its path and summary."""
    path = local_site.init(name, partition=partition, output=output, force=force, local=local)
    return path, siteinit.summary(path)
