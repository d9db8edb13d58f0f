"""The step split: TRL's profiled blocks summed per step (hpc_grpo/runtime/phases.py)."""

from __future__ import annotations

import types
from typing import Any

from hpc_grpo.runtime.rank import phases


def test_blocks_sum_per_phase_and_take_starts_afresh() -> None:
    times = phases.PhaseTimes()
    times.add("GRPOTrainer.vLLM.generate", 0.5)
    times.add("MyTrainer.vLLM.generate", 0.25)  # a subclass's prefix
    times.add("GRPOTrainer.sync_weights", 0.125)
    times.add("GRPOTrainer._get_per_token_logps_and_entropies", 9.0)  # inside others: ignored
    assert times.take() == {"generate_s": 0.75, "sync_weights_s": 0.125}
    assert times.take() == {}


def test_install_routes_a_profiling_class_and_keeps_its_own_logging() -> None:
    seen: list[tuple[str, float]] = []

    class Context:
        def __init__(self, name: str) -> None:
            self.name = name

        def _log_metrics(self, duration: float) -> None:
            seen.append((self.name, duration))

    module = types.SimpleNamespace(ProfilingContext=Context)
    phases.STEP.take()
    assert phases.install(module) and phases.install(module)  # the second call is a no-op
    Context("GRPOTrainer.compute_loss")._log_metrics(0.5)
    assert seen == [("GRPOTrainer.compute_loss", 0.5)]  # counted once, still logged
    assert phases.STEP.take() == {"loss_forward_s": 0.5}
    assert not phases.install(types.SimpleNamespace())  # no hook: nothing routed


def test_install_on_the_real_trl_profiling_context() -> None:
    from trl.extras import profiling

    phases.STEP.take()
    assert phases.install(profiling)
    context: Any = profiling.ProfilingContext(name="GRPOTrainer.vLLM.generate", report_to=[])
    with context:
        pass
    assert set(phases.STEP.take()) == {"generate_s"}
