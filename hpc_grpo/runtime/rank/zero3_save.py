"""A ZeRO-3 checkpoint without the gathered model file writes DeepSpeed's files once, not twice.

Why: in transformers 5.x, ``Trainer._save_checkpoint`` first calls ``save_model``. Under ZeRO-3
with ``stage3_gather_16bit_weights_on_model_save`` off (the runtime's choice for every
full-parameter ZeRO-3 run, ``grpo_args.deepspeed_config``), accelerate's ``get_state_dict``
raises ValueError and ``save_model`` falls back to ``model_wrapped.save_checkpoint(output_dir)``:
DeepSpeed's whole checkpoint, every rank's optimizer partition included. ``_save_checkpoint`` then calls
``_save_optimizer_and_scheduler``, which calls ``save_checkpoint(output_dir)`` again, into the
same folder. The files on disk are the same; the save takes twice the time its bytes need (a 7B
checkpoint is 86.6 GiB, written at about 1 GB/s on the lent H100 machine).

What the wrapper does: for the call inside ``_save_checkpoint`` (only while it runs) it keeps
the rest of the fallback (the config and tokenizer files, on the writing rank only, as
transformers 5.17 and 5.24 both do; the placeholder model file removed) and leaves DeepSpeed's
files to the optimizer save that follows. Unchanged: a ``save_model`` called from anywhere else
(the user's; transformers' push_to_hub and Ray Tune save, internal calls with no optimizer save
after them), ``save_only_model`` (no optimizer save follows), LoRA (peft's ZeRO-3 path gathers
the adapter itself and never falls back), and every layout that gathers the model file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.grpo_args import deepspeed_config


def falls_back_to_deepspeed(run: RunRecord) -> bool:
    """save_model would write DeepSpeed's checkpoint itself: ZeRO-3, no gathered model file,
    full parameters."""
    if run.deepspeed is None or run.peft is not None:
        return False
    model_file = bool(run.grpo_config.get("save_only_model"))
    zero = deepspeed_config(dataclasses.asdict(run.deepspeed), model_file)["zero_optimization"]
    return zero["stage"] == 3 and not zero.get("stage3_gather_16bit_weights_on_model_save", False)


def install(trainer: Any, run: RunRecord) -> str | None:
    """Wrap ``trainer.save_model`` where the fallback applies; returns the rank log's line."""
    if not falls_back_to_deepspeed(run) or trainer.args.save_only_model:
        return None
    saving = _within(trainer)
    trainer.save_model = _checkpoint_save_model(trainer, trainer.save_model, saving)
    return ("ZeRO-3 without a gathered model file: each checkpoint writes DeepSpeed's files once "
            "(transformers' save_model would write them a first time)")


def _within(trainer: Any) -> list[bool]:
    """A flag set while ``trainer._save_checkpoint`` runs: transformers also calls save_model
    with ``_internal_call=True`` from push_to_hub and Ray Tune's save, where no optimizer save
    follows and DeepSpeed's files must be written by save_model itself."""
    flag = [False]
    original = trainer._save_checkpoint

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        flag[0] = True
        try:
            return original(*args, **kwargs)
        finally:
            flag[0] = False

    trainer._save_checkpoint = save_checkpoint
    return flag


def _checkpoint_save_model(trainer: Any, original: Callable[..., Any],
                           saving: list[bool]) -> Callable[..., Any]:
    from transformers.trainer_pt_utils import remove_dummy_checkpoint
    from transformers.utils import SAFE_WEIGHTS_NAME, WEIGHTS_NAME

    def save_model(output_dir: str | None = None, _internal_call: bool = False) -> None:
        if not (_internal_call and saving[0]):
            original(output_dir, _internal_call=_internal_call)
            return
        folder = output_dir if output_dir is not None else trainer.args.output_dir
        if trainer.args.should_save:  # _save assumes the writing rank in transformers 5.17
            trainer._save(folder, state_dict={})  # config, tokenizer; as transformers' fallback
        remove_dummy_checkpoint(trainer.args.should_save, folder, [WEIGHTS_NAME, SAFE_WEIGHTS_NAME])

    return save_model
