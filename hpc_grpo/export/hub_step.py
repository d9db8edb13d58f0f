"""A recipe's ``push_to_hub``/``hub_model_id`` as the step after training (issue #28).

Where the site's nodes reach the hub (the profile's ``nodes_online: true``; the local site),
run.json's ``hub`` block has ``on_node`` and rank 0's node task runs `hpc-grpo export RUN_DIR
--push REPO` once training is done (runtime/node/hub_push.py): the same command, in the same
code path, as on a login node. Elsewhere (offline or unsaid) nothing is pushed from the nodes:
the plan's warning gives the command to run on the login node and `status` shows the push
pending until pushes.jsonl records it. TRL's ``hub_strategy`` other than ``end`` (pushes of
each save or checkpoint) is not done: one push of the checked model, said in a warning.
"""

from __future__ import annotations

import dataclasses

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.export.push import check_repo_id
from hpc_grpo.planner.job import JobPlan
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hub import HubBlock, push_command

STRATEGIES = ("end", "every_save", "checkpoint", "all_checkpoints")  # TRL's hub_strategy


def hub_block(spec: JobSpec, site: SiteProfile) -> HubBlock | None:
    """run.json's block: None without push_to_hub or without a repository to push to."""
    if not spec.push_to_hub or not spec.hub_model_id:
        return None

    try:
        check_repo_id(spec.hub_model_id)
    except UserError as err:
        raise UserError(f"hub_model_id: {err.message}", field="hub_model_id", hint=err.hint) from None
    if spec.hub_strategy not in STRATEGIES:
        raise UserError(f"hub_strategy {spec.hub_strategy!r} is not one of TRL's",
                        field="hub_strategy", hint=", ".join(STRATEGIES))
    return HubBlock(spec.hub_model_id, spec.hub_private_repo, on_node=site.nodes_reach_hub)


def notes(spec: JobSpec, site: SiteProfile) -> tuple[str, ...]:
    """The plan's warnings about the push after training (none without push_to_hub)."""
    if not spec.push_to_hub:
        return ()
    block = hub_block(spec, site)
    if block is None:
        return ("push_to_hub without hub_model_id: nothing is pushed; after the run, on the login "
                "node: `hpc-grpo export RUN --push ORG/NAME`",)
    out = []
    if spec.hub_strategy != "end":
        out.append(f"hub_strategy {spec.hub_strategy}: hpc-grpo pushes once, the checked export "
                   "of the last checkpoint at the end of the run, no checkpoint pushes")
    if block.on_node:
        out.append(f"push_to_hub: when training is done, rank 0's node task exports the last "
                   f"checkpoint and pushes it to {block.repo_id} (`{push_command('RUN', block)}`"
                   f" on the node; HF_TOKEN must reach the job; log: logs/hub-push.log)")
    else:
        why = ("nodes_online: false" if site.nodes_online is False else
               "HF_HUB_OFFLINE in its env" if site.nodes_offline else "nodes_online unsaid")
        out.append(f"push_to_hub: site '{site.name}' nodes do not reach the hub ({why}): when "
                   f"the run is done, on the login node: `{push_command('RUN', block)}` with "
                   "this run's id (`status` shows the push pending)")
    return tuple(out)


def run_record(plan: JobPlan, run_id: str, run_dir: str) -> RunRecord:
    """The plan's run.json record with its hub block."""
    return dataclasses.replace(plan.run_record(run_id, run_dir),
                               hub=hub_block(plan.spec, plan.site))


