"""run.json -> GRPOConfig kwargs, DeepSpeed config, summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.observe.summary import summarize
from hpc_grpo.runtime.rank.setup.grpo_args import ConfigError, deepspeed_config, grpo_kwargs, unknown_keys

KNOWN = ["max_steps", "learning_rate", "bf16", "fp16", "output_dir", "seed", "use_cpu",
         "use_vllm", "vllm_mode", "deepspeed", "logging_steps", "num_generations"]  # fmt: skip


def run(**over: Any) -> RunRecord:
    base = {"seed": 7, "device": "cpu", "grpo_config": {"max_steps": 5, "learning_rate": 0.01},
            "vllm": {"enabled": False}, "deepspeed": None}  # fmt: skip
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                                **base, **over})


def test_cpu_kwargs(tmp_path: Path) -> None:
    kwargs, notes = grpo_kwargs(run(), tmp_path, KNOWN)
    assert kwargs["output_dir"] == str(tmp_path / "checkpoints")
    assert kwargs["seed"] == 7 and kwargs["use_cpu"] is True
    assert kwargs["bf16"] is False and kwargs["use_vllm"] is False
    assert kwargs["logging_steps"] == 1 and kwargs["max_steps"] == 5
    assert notes == []


def test_vllm_on_cpu_is_noted(tmp_path: Path) -> None:
    _, notes = grpo_kwargs(run(vllm={"enabled": True}), tmp_path, KNOWN)
    assert "use_vllm=False" in notes[0]


def test_cuda_vllm_fields(tmp_path: Path) -> None:
    vllm = {"enabled": True, "mode": "colocate", "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.4, "enable_sleep_mode": True}  # fmt: skip
    kwargs, _ = grpo_kwargs(run(device="cuda", vllm=vllm), tmp_path, KNOWN)
    assert kwargs["use_vllm"] and kwargs["vllm_tensor_parallel_size"] == 2
    assert kwargs["vllm_enable_sleep_mode"] is True and kwargs["bf16"] is True
    assert kwargs["use_cpu"] is False


def test_unknown_and_conflicting_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'learning_rat' \\(did you mean 'learning_rate'\\?\\)"):
        grpo_kwargs(run(grpo_config={"learning_rat": 1}), tmp_path, KNOWN)
    with pytest.raises(ConfigError, match="seed=1"):
        grpo_kwargs(run(grpo_config={"seed": 1}), tmp_path, KNOWN)
    with pytest.raises(ConfigError, match="bf16=True is not supported on device cpu"):
        grpo_kwargs(run(grpo_config={"bf16": True}), tmp_path, KNOWN)
    assert unknown_keys(["zzz"], KNOWN) == ["'zzz'"]


def test_deepspeed_file(tmp_path: Path) -> None:
    ds = {"zero_stage": 3, "offload_optimizer": True, "overlap_comm": False}
    kwargs, _ = grpo_kwargs(run(deepspeed=ds), tmp_path, KNOWN)
    assert Path(kwargs["deepspeed"]).is_file()
    cfg = deepspeed_config(ds)["zero_optimization"]
    assert cfg["stage"] == 3 and cfg["offload_optimizer"]["device"] == "cpu"
    assert cfg["overlap_comm"] is False and cfg["contiguous_gradients"] is True
    with pytest.raises(ConfigError):
        deepspeed_config({"zero_stage": 4})


@pytest.mark.parametrize(("deepspeed", "peft", "user", "gathers"), [
    ({"zero_stage": 3}, None, {}, False),  # DeepSpeed's files resume it; export writes a model
    ({"zero_stage": 3, "offload_optimizer": True}, None, {}, False),
    ({"zero_stage": 3}, {"r": 8}, {}, False),  # transformers gathers the adapter itself
])
def test_zero3_never_gathers_a_model_file(
        tmp_path: Path, deepspeed: dict[str, Any], peft: dict[str, Any] | None,
        user: dict[str, Any], gathers: bool) -> None:
    kwargs, _ = grpo_kwargs(run(deepspeed=deepspeed, peft=peft, grpo_config=user), tmp_path, KNOWN)
    zero = json.loads(Path(kwargs["deepspeed"]).read_text())["zero_optimization"]
    assert zero["stage3_gather_16bit_weights_on_model_save"] is gathers


@pytest.mark.parametrize(("nodes", "ppn", "deepspeed", "user", "want"), [
    (2, 2, None, {}, True),  # 4 ranks: one DDP bucket layout for every step
    (1, 3, None, {}, True),
    (1, 2, None, {}, None),  # two summands commute: TRL's default stays
    (2, 2, {"zero_stage": 2}, {}, None),  # DeepSpeed reduces without DDP
    (2, 2, None, {"ddp_find_unused_parameters": False}, False),  # the recipe's word wins
])
def test_ddp_keeps_one_bucket_layout_from_three_ranks(
        tmp_path: Path, nodes: int, ppn: int, deepspeed: dict[str, Any] | None,
        user: dict[str, Any], want: bool | None) -> None:
    known = [*KNOWN, "ddp_find_unused_parameters"]
    kwargs, _ = grpo_kwargs(run(nodes=nodes, procs_per_node=ppn, deepspeed=deepspeed,
                                grpo_config={"max_steps": 5, **user}), tmp_path, known)
    assert kwargs.get("ddp_find_unused_parameters") is want


def test_summary_windows() -> None:
    rows = [{"step": s, "reward_mean": float(s), "step_time": 0.5} for s in range(1, 31)]
    rows.append({"step": 30, "reward_mean": 30.0, "step_time": 0.5})  # duplicate line
    s = summarize(rows)
    assert s["steps"] == 30 and s["reward_first_mean"] == 5.5 and s["reward_last_mean"] == 25.5
    assert s["reward_delta"] == 20.0 and s["train_time_s"] == 15.0
    short = summarize(rows[:6])
    assert short["window"] == 3 and short["reward_delta"] == 3.0


@pytest.mark.parametrize(("device", "dtype", "pure", "deepspeed", "loads"), [
    ("cpu", "bfloat16", False, None, "float32"),  # open-r1's torch_dtype on a CPU site
    ("cuda", "bfloat16", False, None, "float32"),  # DDP: the weights are the master copy
    ("cuda", "auto", False, None, "float32"),  # the checkpoint's dtype, bf16 for most
    ("cuda", "float16", False, None, "float32"),
    ("cuda", "bfloat16", False, {"zero_stage": 2}, "bfloat16"),  # DeepSpeed keeps fp32 masters
    ("cuda", "", False, {"zero_stage": 3}, None),  # TRL's default, float32
    ("cuda", "bfloat16", True, None, "bfloat16"),  # pure bf16, asked for
    ("cuda", "", True, None, "bfloat16"),
    ("cuda", "float32", False, None, "float32"),
])
def test_the_ranks_load_dtype_keeps_fp32_master_weights_unless_pure_bf16_is_asked(
        tmp_path: Path, device: str, dtype: str, pure: bool, deepspeed: dict[str, Any] | None,
        loads: str | None) -> None:
    """Issue #27: torch_dtype: bfloat16 trained bf16 weights and Adam moments under DDP while the
    plan said fp32; the load dtype now follows the one precision story the plan reports."""
    record = run(device=device, deepspeed=deepspeed,
                 model_load={"dtype": dtype, "pure_bf16": pure})
    kwargs, _ = grpo_kwargs(record, tmp_path, [*KNOWN, "model_init_kwargs"])
    assert (kwargs.get("model_init_kwargs") or {}).get("dtype") == loads
