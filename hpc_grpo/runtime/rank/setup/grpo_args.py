"""From the run record to GRPOConfig keyword arguments and a DeepSpeed config (stdlib only).

The runtime owns the fields that must agree with the run directory, the rank layout and the
device; a user value for one of them that disagrees is an error, not a silent override. The one
side effect: ``grpo_kwargs`` writes the DeepSpeed JSON that GRPOConfig's ``deepspeed`` points at.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.precision import as_loaded, load_dtype
from hpc_grpo.runtime.rank.setup.model_load import merge_init_kwargs

# Fields set from run.json's other blocks; grpo_config may repeat them only with the same value.
OWNED = (
    "output_dir",
    "seed",
    "use_cpu",
    "deepspeed",
    "use_vllm",
    "vllm_mode",
    "vllm_tensor_parallel_size",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
    "vllm_max_model_length",
)
IS_CORRECTION = "vllm_importance_sampling_correction"
DEFAULTS: dict[str, Any] = {
    "logging_steps": 1,  # one metrics line per optimizer step
    "report_to": "none",
    "disable_tqdm": True,  # progress bars make unreadable rank logs
    "save_strategy": "steps",
    "save_steps": contract.DEFAULT_SAVE_STEPS,
}


class ConfigError(ValueError):
    """A grpo_config that GRPOConfig would reject or that contradicts run.json."""


def unknown_keys(keys: Iterable[str], known: Iterable[str]) -> list[str]:
    """Messages for keys GRPOConfig does not have, with the closest known name."""
    known_list = sorted(known)
    out = []
    for key in sorted(keys):
        if key not in known_list:
            close = difflib.get_close_matches(key, known_list, n=1, cutoff=0.6)
            out.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return out


def deepspeed_config(ds: Mapping[str, Any]) -> dict[str, Any]:
    """A DeepSpeed JSON with "auto" where the Trainer fills in batch sizes and precision."""
    stage = int(ds.get("zero_stage", 2))
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"deepspeed zero_stage must be 0-3, got {stage}")
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": bool(ds.get("overlap_comm", True)),
        "contiguous_gradients": bool(ds.get("contiguous_gradients", True)),
    }
    if ds.get("offload_optimizer"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if stage == 3:
        # A bf16 model file in each checkpoint, gathered on rank 0's host first (2 B/param), is
        # not needed to resume: DeepSpeed's own files hold the fp32 master weights, and
        # `hpc-grpo export` (posttrain/weights.py, zero_to_fp32) writes a model folder from them.
        # Left out of full-parameter runs: the gather is a collective over every parameter on
        # the stop's path to the next attempt (the 1.5B two-node sandbox: 3 GB gathered over
        # the nodes' link and written by rank 0 while the other ranks wait), and with optimizer
        # offload the host is what runs out (a 7B save was OOM-killed on a 126 GiB host, issue
        # #15). LoRA does not need it: under ZeRO-3 transformers' save_model gathers the adapter
        # itself (``_zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)``).
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    return {
        "zero_optimization": zero,
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }


def grpo_kwargs(
    run: RunRecord, run_dir: Path, known: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """GRPOConfig keyword arguments for this run, and notes worth recording in state.json."""
    user = dict(run.grpo_config)
    bad = unknown_keys(user, known)
    if bad:
        raise ConfigError("unknown grpo_config keys for TRL's GRPOConfig: " + ", ".join(bad))
    cuda = run.device == "cuda"
    notes: list[str] = []
    owned: dict[str, Any] = {
        "output_dir": str(run_dir / contract.CHECKPOINTS),
        "seed": run.seed,
        "use_cpu": not cuda,
    }
    vllm = run.vllm
    if vllm.enabled and cuda:
        owned.update(
            use_vllm=True,
            vllm_mode=vllm.mode,
            vllm_tensor_parallel_size=vllm.tensor_parallel_size,
            vllm_gpu_memory_utilization=vllm.gpu_memory_utilization,
            vllm_enable_sleep_mode=vllm.enable_sleep_mode,
        )
        if vllm.max_model_length:
            owned["vllm_max_model_length"] = vllm.max_model_length
        # TRL's default, written out: with it TRL compares vLLM's log-probabilities of the
        # sampled tokens with the trainer's every step, the evidence that the engine generates
        # with the weights just trained (metrics.jsonl vllm_logp_diff_*). It also weights the
        # loss by their ratio, so a user may turn it off; the check is then gone, and said so.
        user.setdefault(IS_CORRECTION, True)
        if not user[IS_CORRECTION]:
            notes.append(f"{IS_CORRECTION}=False: TRL compares no vLLM and trainer log-probabilities;"
                         " metrics.jsonl has no vllm_logp_diff and status cannot flag drift")
    else:
        owned["use_vllm"] = False
        if vllm.enabled:
            notes.append("use_vllm=False: vLLM needs CUDA; generating with transformers on CPU")
    if run.deepspeed is not None:
        path = run_dir / contract.DEEPSPEED_JSON
        rundir.write_json_atomic(path, deepspeed_config(dataclasses.asdict(run.deepspeed)))
        owned["deepspeed"] = str(path)
    for key in OWNED:
        if key in user and key in owned and user[key] != owned[key]:
            raise ConfigError(
                f"grpo_config sets {key}={user[key]!r} but the run needs {owned[key]!r}; "
                "set it through run.json's seed/device/vllm/deepspeed blocks instead"
            )
    if not cuda:
        for key in ("bf16", "fp16"):
            if user.get(key):
                raise ConfigError(f"grpo_config {key}=True is not supported on device cpu")
            user[key] = False
    else:
        user.setdefault("bf16", True)
    user.setdefault("ddp_timeout", run.collective_timeout_s)  # the process group's (process_group.py)
    user.setdefault("run_name", run.run_id)  # the trackers' run name (tracking.py)
    if run.deepspeed is None and run.world_size > 2:
        # DDP sums a bucket over the ranks in an order that depends on where each element sits
        # in the bucket, and lays its buckets out by parameter order for a process's first step,
        # then by the order the gradients became ready. A resumed process's first step so used
        # the other layout: weights a few ulp off the uninterrupted run's (from 3 ranks up; two
        # summands commute), enough to change a sampled token 20-30 steps later (issue #13's
        # chaos run). Looking for unused parameters keeps DDP on one layout for every step.
        user.setdefault("ddp_find_unused_parameters", True)
    owned.update(_run_fields(run, user))
    # Retention is the ranks' own (checkpoints.retain, after the completion marker): transformers
    # rotates inside the save, before the marker, counting folders rather than complete
    # checkpoints, and so deleted the newest complete one while the next was not yet complete
    # (tests/unit/runtime/rank/test_retention.py). The run's limit: checkpoints/folders.retention_limit.
    owned["save_total_limit"] = None
    return {**DEFAULTS, **user, **owned}, notes


def _run_fields(run: RunRecord, user: Mapping[str, Any]) -> dict[str, Any]:
    """GRPOConfig fields that come from run.json's reward and model blocks: reward_weights (one
    per reward, checked here because TRL checks only once the model has loaded) and
    model_init_kwargs (the model block merged into the recipe's own)."""
    out: dict[str, Any] = {}
    weights = [float(w) for w in run.reward_weights or user.get("reward_weights") or ()]
    if run.reward_weights and user.get("reward_weights") not in (None, weights):
        raise ConfigError(f"grpo_config sets reward_weights={user['reward_weights']!r} but the run "
                          f"has {weights!r}; set them in one place")
    if weights:
        if len(weights) != len(run.reward_funcs):
            raise ConfigError(f"reward_weights has {len(weights)} values for {len(run.reward_funcs)} "
                              f"rewards ({', '.join(run.reward_funcs)}): give one weight per reward")
        out["reward_weights"] = weights
    # Dtypes compare by what they load in: run.json records the load dtype (older ones the
    # asked one), the recipe's model_init_kwargs the asked one (fp32 masters: rundir/precision).
    deepspeed = run.deepspeed is not None
    block = as_loaded(run.model_load, deepspeed)
    theirs = dict(user.get("model_init_kwargs") or {})
    if theirs.get("dtype"):
        theirs["dtype"] = load_dtype(dataclasses.replace(block, dtype=str(theirs["dtype"])), deepspeed)
    init = dict(merge_init_kwargs(theirs, block) or {})
    dtype = load_dtype(dataclasses.replace(block, dtype=str(init.get("dtype") or "")), deepspeed)
    if dtype:
        init["dtype"] = dtype
    if init:
        out["model_init_kwargs"] = init
    return out
