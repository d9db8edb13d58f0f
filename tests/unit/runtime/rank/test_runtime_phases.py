"""The step split: TRL's profiled blocks summed per step (hpc_grpo/runtime/phases.py)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from hpc_grpo.runtime.rank.observe import phases


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
    assert phases.patch_profiling(module) and phases.patch_profiling(module)  # the second call is a no-op
    Context("GRPOTrainer.compute_loss")._log_metrics(0.5)
    assert seen == [("GRPOTrainer.compute_loss", 0.5)]  # counted once, still logged
    assert phases.STEP.take() == {"loss_forward_s": 0.5}
    assert not phases.patch_profiling(types.SimpleNamespace())  # no hook: nothing routed


def test_install_on_the_real_trl_profiling_context() -> None:
    from trl.extras import profiling

    phases.STEP.take()
    assert phases.patch_profiling(profiling)
    context: Any = profiling.ProfilingContext(name="GRPOTrainer.vLLM.generate", report_to=[])
    with context:
        pass
    assert set(phases.STEP.take()) == {"generate_s"}


def test_memory_phase_is_generation_while_the_engine_is_awake() -> None:
    """From sync_weights' wake-up to generate's return (its sleep included), and only then."""
    seen: list[str] = []

    class Engine:
        def sync_weights(self) -> None:
            seen.append(phases.MEMORY_PHASE())

        def generate(self, prompts: list[str]) -> list[str]:
            seen.append(phases.MEMORY_PHASE())
            self.sleep()
            if not prompts:
                raise RuntimeError("engine died")
            return prompts

        def sleep(self) -> None:  # TRL's llm.sleep: after its profiled block, inside generate
            seen.append(phases.MEMORY_PHASE())

    assert phases.tag_engine(Engine) and phases.tag_engine(Engine)  # the second: no double wrap
    engine = Engine()
    engine.sync_weights()
    assert engine.generate(["p"]) == ["p"]
    engine.sleep()
    assert seen == ["generation", "generation", "generation", "training"]
    with pytest.raises(RuntimeError):
        engine.generate([])
    assert phases.MEMORY_PHASE() == "training"  # left on an exception too
    assert not phases.tag_engine(type("Other", (), {"generate": lambda self: None}))


def test_the_real_trl_engine_class_can_be_tagged() -> None:
    from trl.generation.vllm_generation import VLLMGeneration

    assert phases.engine_class() is VLLMGeneration
    assert phases.tag_engine(VLLMGeneration)
    assert VLLMGeneration.generate.__name__ == "generate"


def test_sampler_keeps_a_peak_per_phase() -> None:
    from hpc_grpo.runtime.rank.observe.memory import GpuMemorySampler

    used = iter([10, 30, 20, 25])
    phase = iter(["training", "generation", "training", "training"])
    sampler = GpuMemorySampler(0, phase=lambda: next(phase))
    info = types.SimpleNamespace(nvmlDeviceGetMemoryInfo=lambda _h: types.SimpleNamespace(
        used=next(used) * 2**30))
    sampler._handle, sampler._nvml = object(), info  # NVML stand-in: this machine has no GPU
    for _ in range(4):
        sampler.sample()
    assert sampler.phase_peaks_gib() == {"generation": 30.0, "training": 25.0}
    assert sampler.peak_gib == 30.0
