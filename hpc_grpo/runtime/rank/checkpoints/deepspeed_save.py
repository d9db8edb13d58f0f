"""A full-parameter DeepSpeed checkpoint holds DeepSpeed's files alone, written once.

Why: an exact resume under DeepSpeed reads DeepSpeed's files only. transformers 5.x resumes
through ``deepspeed_load_checkpoint``: the module from ``mp_rank_00_model_states.pt``, each rank's
fp32 master partition and Adam's m and v from its optimizer file; it never reads the
checkpoint's ``model.safetensors`` (``prefetch.py`` reads ahead what it does read).
What ``Trainer._save_checkpoint``'s first call, ``save_model``, adds is then either a copy or
a second write:
- ZeRO-1/2: ``model.safetensors``, the bf16 weights that DeepSpeed's module states hold again
  (the 7B on 2 x H200, session 46: 13.52 GB beside DeepSpeed's 13.29 GB; written from rank 0's
  GPU through pageable copies, 11.6 s of the stop's 53.4 s save).
- ZeRO-3 with ``stage3_gather_16bit_weights_on_model_save`` off (the runtime's choice for every
  full-parameter ZeRO-3 run, ``grpo_args.deepspeed_config``): accelerate's ``get_state_dict``
  raises ValueError and ``save_model`` falls back to ``model_wrapped.save_checkpoint(output_dir)``,
  DeepSpeed's whole checkpoint, which ``_save_optimizer_and_scheduler`` then writes again into
  the same folder (a 7B checkpoint is 86.6 GiB, written at about 1 GB/s on the lent H100s).

What the wrapper does: for the call inside ``_save_checkpoint`` (only while it runs) it writes
what transformers' fallback writes besides the weights (the config and tokenizer files, on the
writing rank only, as transformers 5.17 and 5.24 both do; the placeholder model file removed)
and leaves the weights to DeepSpeed's save that follows. ``hpc-grpo export`` and ``eval`` read
such a checkpoint through ``zero_to_fp32`` (``posttrain/weights.py``). Unchanged: a
``save_model`` called from anywhere else (the user's; transformers' push_to_hub and Ray Tune
save, internal calls with no optimizer save after them) and LoRA (the adapter file is what it
resumes from).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.setup.grpo_args import deepspeed_config


def leaves_out_model_file(run: RunRecord) -> bool:
    """The run's checkpoints are DeepSpeed's files alone: full parameters under ZeRO-1, 2, or 3
    (ZeRO-3 never gathers a model file: runtime/rank/setup/grpo_args.py)."""
    if run.deepspeed is None or run.peft is not None:
        return False
    return deepspeed_config(dataclasses.asdict(run.deepspeed))["zero_optimization"]["stage"] > 0


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``save_files_once``; its line where the fallback applies."""
    line = save_files_once(trainer, ctx.run)
    return [line] if line else []


def save_files_once(trainer: Any, run: RunRecord) -> str | None:
    """Wrap ``trainer.save_model`` where the fallback applies; returns the rank log's line."""
    if not leaves_out_model_file(run):
        return None
    saving = _within(trainer)
    trainer.save_model = _checkpoint_save_model(trainer, trainer.save_model, saving)
    stage = run.deepspeed.zero_stage if run.deepspeed is not None else 0
    once = ", written once" if stage == 3 else ""  # ZeRO-3's fallback wrote them twice
    return (f"ZeRO-{stage} checkpoints hold DeepSpeed's files alone{once} (no model.safetensors: "
            "hpc-grpo export writes a model folder from them)")


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
    from transformers.trainer_pt_utils import remove_dummy_checkpoint  # here: kept out of the module's import
    from transformers.utils import SAFE_WEIGHTS_NAME, WEIGHTS_NAME  # here: kept out of the module's import

    def save_model(output_dir: str | None = None, _internal_call: bool = False) -> None:
        if not (_internal_call and saving[0]):
            original(output_dir, _internal_call=_internal_call)
            return
        folder = output_dir if output_dir is not None else trainer.args.output_dir
        if trainer.args.should_save:  # _save assumes the writing rank in transformers 5.17
            trainer._save(folder, state_dict={})  # config, tokenizer; as transformers' fallback
        remove_dummy_checkpoint(trainer.args.should_save, folder, [WEIGHTS_NAME, SAFE_WEIGHTS_NAME])

    return save_model
