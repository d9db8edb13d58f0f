"""``min_nodes`` (issue #60): which runs may start an attempt on fewer nodes, and the job at the
fewest, planned like any other. Pure: values in, values out; api plans the smallest job with
``build_plan`` (its memory, batches and checkpoints) and refuses the submission where it does
not fit.

The split at each count is rundir/reshard.py's (``record_at``, which the node task and the
ranks apply to the count Slurm granted); this module only refuses a run where some count in
[min_nodes, nodes] has none, before anything is queued.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.job import JobPlan
from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.contract import RunRecord

_HINT = "lower min_nodes, or leave it 0 (every attempt on all nodes)"


def refused(record: RunRecord) -> UserError | None:
    """The one-line refusal of a run whose record cannot start at some count in
    [min_nodes, nodes] (reshard.min_nodes_refusal), None where every count has a layout."""
    why = reshard.min_nodes_refusal(record)
    if why is None:
        return None
    return UserError(why, field="min_nodes", hint=_HINT)


def smallest(spec: JobSpec, record: RunRecord) -> JobSpec:
    """The job at ``min_nodes``: the same spec on the fewest nodes with the batch split its
    attempts would train with (reshard.record_at), and no min_nodes of its own. Planning it
    checks the memory of the per-rank share at the smallest world size (ZeRO's partitions grow
    as ranks go)."""
    at = reshard.record_at(record, record.min_nodes)
    grpo = {**spec.grpo, **{key: at.grpo_config[key] for key in
                            ("per_device_train_batch_size", "gradient_accumulation_steps")}}
    return dataclasses.replace(spec, nodes=record.min_nodes, min_nodes=0, grpo=grpo)


def at_smallest(problem: UserError, min_nodes: int) -> UserError:
    """The smallest job's refusal, said as min_nodes's."""
    return UserError(f"the job at {min_nodes} node(s) is refused: {problem.message}",
                     field="min_nodes", hint=problem.hint or _HINT)


def check(plan: JobPlan, plan_at: Callable[[JobSpec], object]) -> None:
    """Refuse a min_nodes plan that some attempt could not run, in one line: a count in the range
    without a layout (``refused``), or the job at the fewest nodes (``plan_at``: the caller's
    ``build_plan`` with its probed values) refused by its own plan, e.g. its memory."""
    if not plan.spec.min_nodes:
        return
    record = plan.run_record("", "")
    problem = refused(record)
    if problem is not None:
        raise problem
    try:
        plan_at(smallest(plan.spec, record))
    except UserError as smaller:
        raise at_smallest(smaller, plan.spec.min_nodes) from None
