"""Step one of ``api.prepare``: every login-node check and measurement of a job's inputs,
before any planning (the model resolved and staged, the dataset and rewards checked and probed,
what the site's earlier runs measured, free space, the site's links and output write bandwidth),
as one frozen value the plan is made from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.types import LinkFigures, ModelRef, WriteFigure
from hpc_grpo.preflight import inputs, stage
from hpc_grpo.preflight.links import site_links
from hpc_grpo.preflight.output_write import site_write
from hpc_grpo.rundir.steps import MeasuredStep
from hpc_grpo.runs import registry


@dataclass(frozen=True)
class CheckedInputs:
    """What the plan is made from, checked and measured on the login node first: the spec with
    its dataset resolved and prompt bound measured, the model as staged, what the site's
    earlier runs measured (one per step-time shape: the plan picks its own shape's, for its step
    time and its stop lead, once its layout, and so its shape, is known), the output file
    system's free space, and what to warn about or refuse."""

    spec: JobSpec
    model: ModelRef
    dataset_commit: str
    measured: tuple[MeasuredStep, ...]
    free: tuple[int | None, str]
    notes: tuple[str, ...]
    refused: tuple[UserError, ...]
    links: LinkFigures | None = None  # declared in the profile or measured by doctor, else assumed
    write: WriteFigure | None = None  # the output root's write bandwidth, likewise


def check_inputs(site: SiteProfile, spec: JobSpec, *, root: Path, python: str,
                 site_name: str) -> CheckedInputs:
    """Step one of ``prepare``: every login-node check and measurement, before any planning."""
    model = inputs.resolve_model(spec.model, registry.home_dir())
    dataset = inputs.check_dataset(spec.dataset, spec.prompt_column)
    for reward in spec.reward_funcs:
        inputs.check_reward(reward)
    spec = dataclasses.replace(spec, dataset=dataset)
    staging = stage.check(site, model, spec.model_revision, dataset)  # commit, staged config.json
    # Rewards called on a sample row, the longest prompt measured; what is not staged cannot be
    # read on this machine either (offline), and the stage warning or refusal already says so.
    probed = (inputs.Probed() if staging.missing
              else inputs.probe_inputs(spec, staging.model, python, staging.dataset_commit))
    refused, notes = staging.problems(site, site_name)
    return CheckedInputs(inputs.with_prompt_bound(spec, probed), staging.model,
                         staging.dataset_commit, registry.site_measurements(site.name),
                         inputs.free_space(root), notes + tuple(probed.notes), refused,
                         _links_for_plan(site), site_write(site, str(root)))


def _links_for_plan(site: SiteProfile) -> LinkFigures | None:
    facts = site_links(site)
    return facts.for_plan() if facts else None
