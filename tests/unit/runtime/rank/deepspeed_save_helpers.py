"""The DeepSpeed save tests' trainer and run (moved out of test_deepspeed_save.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.runtime.rank.runtime_checks_helpers import make_run, record

OFFLOAD3 = {"zero_stage": 3, "offload_optimizer": True}


def _run(deepspeed: dict[str, Any] | None, peft: dict[str, Any] | None = None,
         grpo_config: dict[str, Any] | None = None) -> Any:
    over: dict[str, Any] = {"device": "cuda", "deepspeed": deepspeed, "peft": peft}
    if grpo_config is not None:
        over["grpo_config"] = grpo_config
    return record(make_run(1, 2, 1) | over)


class _Engine:
    """DeepSpeed's engine as transformers' save path sees it."""

    def __init__(self) -> None:
        self.config = {"zero_optimization": {"stage": 3}}
        self.saves: list[str] = []

    def save_checkpoint(self, save_dir: str, tag: Any = None, client_state: Any = None,
                        save_latest: bool = True, exclude_frozen_parameters: bool = False) -> None:
        self.saves.append(save_dir)
        Path(save_dir, "global_step1").mkdir(parents=True, exist_ok=True)


@pytest.fixture
def trainer(tmp_path: Path) -> Any:
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from hpc_grpo.runtime.models.tiny import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "model", seed=0))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], save_strategy="steps",
                             use_cpu=True)
    built = Trainer(model=model, args=args)
    built.create_optimizer_and_scheduler(num_training_steps=2)
    engine = _Engine()
    built.is_deepspeed_enabled = True
    built.model_wrapped = built.deepspeed = engine

    def gather_off(model: Any) -> Any:  # accelerate's answer with the gather off
        raise ValueError("stage3_gather_16bit_weights_on_model_save is False")

    built.accelerator.get_state_dict = gather_off
    built.state.global_step = 1
    return built
