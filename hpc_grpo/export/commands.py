"""The api functions of `hpc-grpo export` and `hpc-grpo eval` (api.py re-exports them, at its
size limit): a run found by name or directory, then export/write.py or export/evaluate.py, and
export/push.py for ``--push``."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hpc_grpo.export import best as best_of
from hpc_grpo.export import evaluate as evaluation
from hpc_grpo.export import plan, write
from hpc_grpo.export import push as hub
from hpc_grpo.export import side_job as jobs
from hpc_grpo.rundir.hub import HubBlock, push_command
from hpc_grpo.rundir.view import read_view
from hpc_grpo.runs import registry, runfiles


def export(name: str, *, step: int | None = None, to: str | None = None, dtype: str | None = None,
           adapter: bool = False, python: str = sys.executable,
           announce: Callable[[str], None] | None = None, best: str | None = None,
           push: str | None = None, private: bool | None = None,
           job: bool | None = None) -> write.Exported:
    """A run's complete checkpoint as a checked Hugging Face folder; the torch work runs in a
    child ``python`` (runtime/posttrain/export.py). ``push``: then uploaded to that hub
    repository (``Exported.pushed``); a finished export already at the target is pushed as it is.
    ``job``: True as a job of the run's back end, False here, None: a job where this Slurm
    login node has less memory than the export holds (``Exported.job``; export/side_job.py)."""
    run_dir = registry.find_run(name)
    if push:
        hub.check_repo_id(push)
        hub.require_hub(python)
        write.refuse_missing(run_dir)
        record = runfiles.read_run_record(run_dir, "exported")
        found = hub.existing(run_dir, record, step, best, to, adapter)
        if found is not None:
            the_plan, entry = found
            if announce:
                announce(f"checkpoint-{the_plan.step} is already exported (checked) at "
                         f"{the_plan.target}: pushing that folder")
            done = write.Exported(the_plan, dict(entry.check), (), reused=True)
            return _pushed(done, push, private, python, announce)
    if job is not False:
        submitted = _as_job(run_dir, step=step, best=best, to=to, dtype=dtype, adapter=adapter,
                            push=push, private=private, job=job, announce=announce)
        if submitted is not None:
            return submitted
    result = write.export(run_dir, step=step, to=to, dtype=dtype, adapter=adapter, python=python,
                          announce=announce, best=best)
    if not push or result.error:
        return result
    return _pushed(result, push, private, python, announce)


def _as_job(run_dir: Path, *, step: int | None, best: str | None, to: str | None,
            dtype: str | None, adapter: bool, push: str | None, private: bool | None,
            job: bool | None, announce: Callable[[str], None] | None) -> write.Exported | None:
    """The export submitted as a job when it should be one (None: run it here)."""

    write.refuse_missing(run_dir)
    record = runfiles.read_run_record(run_dir, "exported")
    picked = best_of.pick(run_dir, record.run_id or run_dir.name, step, best)
    if push:
        hub.check_repo_id(push)
    the_plan = plan.build(run_dir, record, picked.step if picked else step, to, dtype, adapter)
    scheduler = read_view(run_dir).scheduler  # the one notion of a local run
    reason = jobs.reason_for(job, the_plan, scheduler, plan.available_memory())
    if not reason:
        return None
    later = bool(push) and not jobs.nodes_reach_hub(record)  # offline nodes: push from here after
    argv = jobs.command(the_plan, jobs.default_python(record, run_dir), to=to, dtype=dtype,
                        push=None if later else push, private=private)
    notes = [f"the site's nodes do not reach the hub: once the job is done, push from here with "
             f"`{push_command(run_dir.name, HubBlock(str(push), private))}`"] if later else []
    for line in ([picked.line()] if picked else []) + [the_plan.line()] + notes:
        if announce:
            announce(line)
    submitted = jobs.submit(the_plan, record, argv, reason)
    return write.Exported(the_plan, {}, (), best=picked, job=submitted)


def _pushed(done: write.Exported, repo_id: str, private: bool | None, python: str,
            announce: Callable[[str], None] | None) -> write.Exported:
    if announce:
        announce(f"pushing {done.plan.target} to {repo_id}")
    pushed = hub.push(done.plan, done.check, repo_id, private=private, python=python)
    return dataclasses.replace(done, pushed=pushed)


def evaluate(target: str, *, step: int | None = None, dataset: str | None = None,
             split: str | None = None, reward_funcs: Sequence[str] = (), limit: int = 64,
             num_samples: int = 1, seed: int = 0, max_new_tokens: int | None = None,
             python: str = sys.executable, best: str | None = None,
             engine: str = "auto") -> evaluation.Evaluated:
    """Mean reward (95% CI) of a run's model or a model folder, with the run's dataset and
    rewards by default (runtime/posttrain/scoring.py generates)."""
    return evaluation.evaluate(target, registry.find_run, step=step, dataset=dataset, split=split,
                               reward_funcs=reward_funcs, limit=limit, num_samples=num_samples,
                               seed=seed, max_new_tokens=max_new_tokens, python=python,
                               best=best, engine=engine)
