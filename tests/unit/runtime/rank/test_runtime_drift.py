"""The ranks' side of "weights reach vLLM" (issue #15): TRL's correction kept on so it measures
the vLLM/trainer log-probability difference, the value in metrics.jsonl, the test-only fault that
keeps the engine's initial weights, the server asked for processed log-probabilities; and a stop
asked for through the stop-request file recorded as a stop request."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir import StopRequest, contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.faults import stale_weights
from hpc_grpo.runtime.rank.setup.grpo_args import grpo_kwargs
from hpc_grpo.runtime.shared.signals import StopFlag, request_cause, request_reason

KNOWN = ["max_steps", "learning_rate", "bf16", "output_dir", "seed", "use_cpu", "use_vllm",
         "vllm_mode", "vllm_tensor_parallel_size", "vllm_gpu_memory_utilization",
         "vllm_enable_sleep_mode", "vllm_importance_sampling_correction"]  # fmt: skip
VLLM = {"enabled": True, "mode": "colocate", "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.3, "enable_sleep_mode": True}  # fmt: skip


def record(**over: Any) -> RunRecord:
    base = {"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m", "dataset": {"name": "d"},
            "nodes": 1, "procs_per_node": 1, "seed": 1, "device": "cuda", "vllm": VLLM,
            "grpo_config": {"max_steps": 5}}  # fmt: skip
    return RunRecord.from_dict({**base, **over})


def test_vllm_runs_keep_trls_correction_on_so_the_difference_is_measured(tmp_path: Path) -> None:
    kwargs, notes = grpo_kwargs(record(), tmp_path, KNOWN)
    assert kwargs["vllm_importance_sampling_correction"] is True and notes == []


def test_turning_the_correction_off_is_allowed_and_says_the_check_is_gone(tmp_path: Path) -> None:
    off = record(grpo_config={"max_steps": 5, "vllm_importance_sampling_correction": False})
    kwargs, notes = grpo_kwargs(off, tmp_path, KNOWN)
    assert kwargs["vllm_importance_sampling_correction"] is False
    assert len(notes) == 1 and "cannot flag drift" in notes[0]


def test_metrics_lines_carry_trls_logp_difference(tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState

    from hpc_grpo.runtime.rank.callbacks import MetricsCallback

    state = TrainerState(global_step=3, max_steps=10, is_world_process_zero=True)
    logs = {"reward": 1.0, "loss": 0.5, "sampling/sampling_logp_difference/mean": 0.013,
            "sampling/sampling_logp_difference/max": 0.4}
    callback = MetricsCallback(tmp_path)
    callback.on_log(None, state, TrainerControl(), logs=logs)  # type: ignore[arg-type]
    callback.on_log(None, state, TrainerControl(), logs={"reward": 1.0})  # type: ignore[arg-type]
    rows = [json.loads(x) for x in (tmp_path / contract.METRICS_JSONL).read_text().splitlines()]
    assert (rows[0][contract.LOGP_DIFF_MEAN], rows[0][contract.LOGP_DIFF_MAX]) == (0.013, 0.4)
    assert contract.LOGP_DIFF_MEAN not in rows[1]  # CPU runs, correction off: no value, no key


def test_the_fault_walks_every_time_but_pushes_the_first_weights() -> None:
    import torch

    weights = {"a": torch.ones(2), "b": torch.zeros(3)}
    walks: list[int] = []

    def walk() -> Any:  # TRL gathers a ZeRO-3 shard per parameter here: a collective per step
        walks.append(1)
        yield from weights.items()

    fault = stale_weights.FirstPushForever(walk)
    first = dict(fault())
    assert first["a"] is weights["a"]  # the first push is the real one
    weights["a"].add_(5.0)  # the optimizer updates in place
    weights["b"].sub_(1.0)
    later = dict(fault())
    assert torch.equal(later["a"], torch.ones(2)) and torch.equal(later["b"], torch.zeros(3))
    assert len(walks) == 2 and fault.pushes == 2


def test_the_fault_is_off_unless_the_environment_asks() -> None:
    def trainer() -> Any:
        return types.SimpleNamespace(vllm_generation=types.SimpleNamespace(
            _iter_named_params=lambda: iter([("w", 1.0)])))

    untouched = trainer()
    assert not stale_weights.apply(untouched, {})
    assert not stale_weights.apply(untouched, {stale_weights.FAULT_ENV: "0"})
    assert not isinstance(untouched.vllm_generation._iter_named_params,
                          stale_weights.FirstPushForever)
    faulty = trainer()
    assert stale_weights.apply(faulty, {stale_weights.FAULT_ENV: "1"})
    assert isinstance(faulty.vllm_generation._iter_named_params, stale_weights.FirstPushForever)
    assert not stale_weights.apply(types.SimpleNamespace(), {stale_weights.FAULT_ENV: "1"})


def test_the_server_reports_processed_log_probabilities() -> None:
    from hpc_grpo.runtime.node import vllm_server

    server = {"node": 0, "gpus": [0], "trainer_gpus": [1]}
    argv = vllm_server.server_argv(record(vllm={**VLLM, "mode": "server", "server": server}), 9)
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"


@pytest.mark.parametrize(("text", "reason", "cause"), [
    ("", "stop-request file", "stop request"),
    ("test: stop at step 3\n", "stop-request file: test: stop at step 3", "stop request"),
    (json.dumps({"reason": "user", "time": 1.0}), "stop-request file: user", "stop request"),
    (json.dumps({"reason": "USR2 to node task on n1", "signal": "USR2"}),
     "stop-request file: signal USR2 (USR2 to node task on n1)", None),
])
def test_a_stop_request_is_told_from_a_signal(text: str, reason: str, cause: str | None) -> None:
    assert request_reason(StopRequest.parse(text)) == reason
    assert request_cause(reason) == cause


def test_a_signal_or_a_peers_stop_is_the_node_tasks_to_name() -> None:
    assert request_cause("signal SIGUSR2") is None
    assert request_cause("another rank's stop request") is None
    assert request_cause(None) is None


def test_the_ranks_read_the_request_the_node_task_wrote(tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState

    from hpc_grpo.runtime.rank.callbacks import GracefulStopCallback

    def stop_reason() -> str | None:
        flag = StopFlag()
        callback = GracefulStopCallback(tmp_path, flag, "cpu")  # type: ignore[arg-type]
        state = TrainerState(global_step=2, max_steps=10)
        control = callback.on_step_end(None, state, TrainerControl())  # type: ignore[arg-type]
        assert control.should_training_stop
        return callback.reason

    rundir.request_stop(tmp_path, "USR2 to node task on n1", signal="USR2")
    assert request_cause(stop_reason()) is None
    rundir.request_stop(tmp_path, "asked by a person")
    assert request_cause(stop_reason()) == contract.STOP_REQUESTED

