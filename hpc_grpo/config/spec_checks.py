"""Job settings of a built JobSpec that the ranks would refuse, or take wrongly, after the queue
wait: an empty model or dataset name, rewards and their weights as the ranks take them, a seed
numpy refuses, a job name no run id can be made from. Each problem is one UserError naming
where the value came from (its flag, ``--set`` or the recipe). Pure: a spec in, problems out
(config/spec.py build_spec reports them with the others)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hpc_grpo.config import names
from hpc_grpo.config.grpo import SEED
from hpc_grpo.config.recipe_format import shown
from hpc_grpo.errors import UserError

if TYPE_CHECKING:
    from hpc_grpo.config.spec import JobSpec

# Job settings that name a thing to load; their hint on what may be given instead.
NAMES = {
    "model": "give a model folder, a hub id, a catalogue name or builtin:tiny",
    "dataset": "give builtin:digits or builtin:sums, a .jsonl/.json/.csv/.parquet file, a "
               "save_to_disk folder or a hub id, or leave it out for builtin:digits",
}


def blank_names(spec: JobSpec, origins: Mapping[str, str]) -> list[UserError]:
    """An empty (or blank) model or dataset name, refused. Why: as a path, "" is the current
    directory (``Path("")`` is ``.``), so ``--dataset "$UNSET"`` or ``--set dataset=`` trained
    on whatever folder the command ran in, and ``--model ''`` loaded the model from it.
    ``origins``: where each key came from (its flag, ``--set`` or the recipe)."""
    problems = []
    for key, how in NAMES.items():
        if not str(getattr(spec, key)).strip():
            problems.append(UserError(
                f"an empty {key} name would mean the current directory",
                field=origins.get(key, f"recipe: {key}"),
                hint=how + ("; an empty shell variable gives an empty name"
                            if origins.get(key, "").startswith("--") else "")))
    return problems


def reward_problems(spec: JobSpec, origins: Mapping[str, str]) -> list[UserError]:
    """The rewards as the ranks will take them, defaults applied: at least one reward, and
    reward_weights either empty (every reward weighs 1) or one finite number per reward. Why
    here: the ranks refuse an empty reward_funcs (rewards.py) and a weight count that differs
    (grpo_args.py, TRL) only after the queue wait, and a NaN or infinite weight makes every
    advantage NaN with nothing refusing it. ``origins`` as for blank_names."""
    funcs = origins.get("reward_funcs", "recipe: reward_funcs")
    where = origins.get("reward_weights", "recipe: reward_weights")
    if not spec.reward_funcs:
        return [UserError("lists no reward: GRPO needs at least one", field=funcs,
                          hint="builtin:NAME, module:function or an open-r1 name (accuracy, "
                               "format, ...); leave reward_funcs out for builtin:length")]
    weights = spec.reward_weights
    if not all(math.isfinite(w) for w in weights):
        return [UserError(f"must be finite numbers, got {shown(list(weights))}", field=where)]
    count = len(spec.reward_funcs)
    if weights and len(weights) != count:
        return [UserError(
            f"{len(weights)} weight{'s' * (len(weights) != 1)} for {count} "
            f"reward{'s' * (count != 1)} ({', '.join(spec.reward_funcs)})", field=where,
            hint=f"one weight per reward, e.g. --set reward_weights=[{','.join(['1.0'] * count)}]; "
                 "--set reward_weights=[] weighs every reward 1")]
    return []


def seed_problems(spec: JobSpec, origins: Mapping[str, str]) -> list[UserError]:
    """A seed outside numpy's range: transformers' set_seed hands it to np.random.seed, which
    raises 'Seed must be between 0 and 2**32 - 1' on every rank (the plan checks seed + the last
    rank too: planner/topology.py check_rank_seeds)."""
    if SEED.ok(spec.seed):
        return []
    return [UserError(f"seed must be {SEED.text}, got {spec.seed}",
                      field=origins.get("seed", "recipe: seed"))]


def name_problems(spec: JobSpec, origins: Mapping[str, str]) -> list[UserError]:
    """The job name, checked where the user gave it: its run ids are made from it, so a name
    that fails there was reported against the run directory ('output_root: .../my job-0001'),
    or not at all ('a/b' nested the run). ``origins`` as for blank_names."""
    if not spec.name:
        return []
    try:
        names.check_job_name(spec.name, origins.get("name", "recipe: name"))
    except UserError as err:
        return [err]
    return []


def spec_problems(spec: JobSpec, origins: Mapping[str, str]) -> list[UserError]:
    """Every problem of this module's checks; ``origins``: where each key came from, its flag
    or ``--set: KEY`` (a key in neither came from the recipe)."""
    return blank_names(spec, origins) + reward_problems(spec, origins) + \
        seed_problems(spec, origins) + name_problems(spec, origins)
