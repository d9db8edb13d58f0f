"""What ``resume`` may change about a run, and whether there is anything left to train.

A resumed run is the same run: it continues from a checkpoint in the same run directory, so the
new job must load that checkpoint exactly as the old job saved it and see the same data in the
same order. What the checkpoint or the data order depend on cannot change (the model, the data,
the world size, the ZeRO layout, the batch shape, the seeds); how long to train and how often to
save can. Pure: two typed run records and numbers in, problems out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hpc_grpo.config.spec import JobSpec
from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import RunRecord

_NEW_RUN = "submit a new run for that"
# What a resume cannot change in run.json, named as the file names it (dotted for nested blocks),
# read from the typed record, with the reason why.
FIXED_RECORD: dict[str, tuple[Callable[[RunRecord], Any], str]] = {
    "model": (lambda r: r.model, "the checkpoint holds this model's weights"),
    "payload": (lambda r: r.payload, "the run directory holds this payload's results"),
    "dataset.name": (lambda r: r.dataset.name,
                     "the checkpoint's data position counts this dataset's prompts"),
    "dataset.prompt_column": (lambda r: r.dataset.prompt_column,
                              "the checkpoint's data position counts this dataset's prompts"),
    "dataset.split": (lambda r: r.dataset.split,
                      "the checkpoint's data position counts this dataset's prompts"),
    "reward_funcs": (lambda r: r.reward_funcs,
                     "the rewards logged so far come from these functions"),
    "seed": (lambda r: r.seed,
             "the data order and every RNG stream in the checkpoint follow this seed"),
    "device": (lambda r: r.device,
               "the checkpoint's optimizer and RNG states were saved on this device"),
    "vllm.tensor_parallel_size": (lambda r: r.vllm.tensor_parallel_size,
                                  "vLLM's sampling seeds are rank // TP: another TP size samples "
                                  "other completions"),
    "vllm.mode": (lambda r: r.vllm.mode,
                  "server mode trains on other GPUs than colocate: another world size"),
    # Staged on the login node (preflight/stage.py): a branch staged again since points elsewhere.
    "model_load.commit": (lambda r: r.model_load.commit,
                          "the run trains from this commit of the model (stage it with "
                          "--revision COMMIT and resume with --set model_revision=COMMIT)"),
    "dataset.commit": (lambda r: r.dataset.commit,
                       "the checkpoint's data position counts this commit's prompts"),
}
# GRPOConfig fields that shape the batch or the data order: another value trains other steps.
FIXED_GRPO: dict[str, str] = {
    "per_device_train_batch_size": "the checkpoint's data position counts batches of this size",
    "gradient_accumulation_steps": "the checkpoint's data position counts these micro-steps",
    "num_generations": "the checkpoint's data position counts prompts per group of this size",
    "generation_batch_size": "it sets how many prompts each step draws",
    "steps_per_generation": "it sets how many prompts each step draws",
    "seed": "the data order and every RNG stream in the checkpoint follow this seed",
    "data_seed": "the checkpoint's data position is in this seed's order",
    "shuffle_dataset": "the checkpoint's data position is in this order",
}


def pinned_layout(spec: JobSpec, record: RunRecord) -> JobSpec:
    """The spec of a resume with the saved run's TP size, ZeRO stage and optimizer offload where
    the spec leaves them to the planner. The plan picks the fastest layout from the link figures,
    which doctor may have measured since the run started; a layout chosen again would not load
    the checkpoint (``unchangeable`` refuses it), so the saved one stands. What the user sets on
    the resume stays theirs, and is refused there if it differs."""
    if record.device != "cuda":
        return spec  # CPU plans choose no layout
    pins: dict[str, Any] = {}
    tp = record.vllm.tensor_parallel_size
    if not spec.tensor_parallel_size and tp > 0:
        pins["tensor_parallel_size"] = tp
    if spec.zero_stage is None:
        pins["zero_stage"] = _zero(record) or 0
    if spec.offload_optimizer is None and record.deepspeed is not None:
        pins["offload_optimizer"] = bool(record.deepspeed.offload_optimizer)
    return dataclasses.replace(spec, **pins) if pins else spec


def _zero(record: RunRecord) -> int | None:
    return record.deepspeed.zero_stage if record.deepspeed is not None else None


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return "unset" if value is None else str(value)


def unchangeable(old: RunRecord, new: RunRecord) -> list[UserError]:
    """Each difference between the run's record and the resumed job's that a resume cannot make,
    one problem each, with the reason (the site profile changing under a run counts too)."""
    problems: list[UserError] = []
    for key, (read, why) in FIXED_RECORD.items():
        was, now = read(old), read(new)
        if was not in (None, "") and _shown(was) != _shown(now):  # "": older or unstaged
            problems.append(UserError(f"cannot change {key} from {_shown(was)} to {_shown(now)}: "
                                      f"{why}", field="resume", hint=_NEW_RUN))
    (nodes, procs, zero) = (old.nodes, old.procs_per_node, _zero(old))
    (new_nodes, new_procs, new_zero) = (new.nodes, new.procs_per_node, _zero(new))
    if (nodes, procs) != (new_nodes, new_procs):
        shards = (f"ZeRO-{zero} saved optimizer and parameter shards for {nodes} x {procs} ranks"
                  if zero else f"the checkpoint holds RNG states for {nodes} x {procs} ranks and "
                  "the batch of every step spans them")
        problems.append(UserError(
            f"cannot change the layout from {nodes} node(s) x {procs} process(es) to {new_nodes} x "
            f"{new_procs}: {shards}", field="resume",
            hint=f"keep nodes at {nodes}, or {_NEW_RUN}"))
    elif zero != new_zero:
        problems.append(UserError(
            f"cannot change the ZeRO stage from {_shown(zero)} to {_shown(new_zero)}: "
            "the checkpoint's optimizer state is laid out for its stage", field="resume",
            hint=_NEW_RUN))
    old_grpo, new_grpo = old.grpo_config, new.grpo_config
    for key, why in FIXED_GRPO.items():
        if old_grpo.get(key) != new_grpo.get(key):
            problems.append(UserError(
                f"cannot change {key} from {_shown(old_grpo.get(key))} to "
                f"{_shown(new_grpo.get(key))}: {why}", field="resume", hint=_NEW_RUN))
    return problems


def left_to_train(*, phase: str, step: int, checkpoint_step: int, max_steps: int) -> UserError | None:
    """Why there is nothing to resume (training done, or max_steps not past the checkpoint)."""
    if max_steps <= 0:  # TRL's -1: by epochs; the trainer knows its own end
        return None
    if phase == "done" and max_steps <= step:
        return UserError(f"the run finished at step {step}: max_steps {max_steps} leaves nothing "
                         "to train", field="resume",
                         hint=f"to train further, --set max_steps=N with N > {step}")
    if max_steps <= checkpoint_step:
        return UserError(f"max_steps {max_steps} is not past the checkpoint at step "
                         f"{checkpoint_step}: nothing would be trained", field="resume",
                         hint=f"--set max_steps=N with N > {checkpoint_step}")
    return None
