"""The colocated vLLM engine starts without reading the model files: its weights are the trainer's,
pushed before the first generation.

Why: TRL 1.16 builds the engine with ``LLM(model=model.name_or_path, ...)``
(trl/generation/vllm_generation.py ``_init_vllm``), so every rank reads the whole model from disk
a second time (the trainer read it a moment before) and copies it to its GPU. Those weights are
never used: ``GRPOTrainer`` starts with ``_last_loaded_step = -1``, so its first generation pushes
every parameter of the trainer's model into the engine (``sync_weights``: each named parameter,
also for a peft model, whose merged base weights are pushed whole), and a resumed run's engine
would hold the base model, not the checkpoint's weights, until that push anyway. With sleep mode
TRL even discards them at once (``llm.sleep(level=2)``). vLLM's own answer for RL is
``load_format="dummy"`` (vLLM's example ``rl/skip_loading_weights_in_engine_init.py``; verl's
rollout engines do the same): the engine allocates and fills its weights on the GPU without
reading a file. At 7B that is about 15 GB a rank of reading and host-to-GPU copying off every
start and restart (issue #29); the time it saves was not measured apart from the rest (2 x H200,
session 40: no A/B on one loan).

The first push is watched (``check_first_push``): vLLM's ``load_weights`` returns the names of
the parameters it filled, and one the push left unfilled (a model whose trainer-side names vLLM
does not map, e.g. fused MoE experts) would stay random. That ends the attempt before its first
step in one line on every rank alike (a configuration error, not retried), with the switch that
reads the files instead; the rank log says when all were filled.

Not used (the engine reads the model files as TRL wrote it) where the push would not cover what
the files hold: a quantized model (TRL passes ``quantization="bitsandbytes"``, which loads and
quantizes from the files), a model with persistent buffers (in its files but not among the
parameters TRL pushes), or when ``HPC_GRPO_ENGINE_DUMMY_WEIGHTS=0``. Checked on a GPU
(session 40): with the engine from random weights, tests/gpu/test_weights_reach_vllm.py's healthy
run scored the first step's tokens 0.0089 nats from the trainer (bound 0.1), and the 7B resume
(tests/gpu/test_resume_7b.py) equalled the uninterrupted run at every step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from typing import Any

from hpc_grpo.runtime.rank.context import HookContext

ENV = "HPC_GRPO_ENGINE_DUMMY_WEIGHTS"
NOTE = "vLLM engine started without reading the model files (the first push fills it)"
QUANTIZED_LAYERS = ("Linear4bit", "Linear8bitLt")
# vLLM parameters a model's files need not hold (quantization's KV-cache scales, set in code
# where absent): never counted as unfilled
NOT_FROM_FILES = (".k_scale", ".v_scale", ".q_scale", ".prob_scale", ".kv_scale")


def why_not(model: Any) -> str | None:
    """Why this model's engine must read the model files (None: the first push fills it)."""
    if getattr(getattr(model, "config", None), "quantization_config", None) is not None or any(
            type(module).__name__ in QUANTIZED_LAYERS for module in model.modules()):
        return "quantized model"
    kept = persistent_buffers(model)
    if kept:
        return f"persistent buffers TRL does not push ({', '.join(kept[:3])})"
    return None


def persistent_buffers(model: Any) -> list[str]:
    """The buffers a state dict holds (the model files have them; TRL pushes parameters only)."""
    return [f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules()
            for name, buffer in module._buffers.items()
            if buffer is not None and name not in module._non_persistent_buffers_set]


@contextlib.contextmanager
def engine_from_pushed_weights(env: Mapping[str, str]) -> Iterator[None]:
    """While the trainer is built, TRL's colocate engine start passes ``load_format="dummy"``
    to vLLM's ``LLM`` where ``why_not`` allows, and says which in the rank log. TRL's method
    and module attribute are put back when the block ends, also on an exception."""
    target = _target() if env.get(ENV, "1") != "0" else None
    if target is None:
        yield
        return
    module, owner, raw = target

    @functools.wraps(raw)
    def init_vllm(self: Any, *args: Any, **kwargs: Any) -> Any:
        reason = why_not(self.model) if getattr(self, "mode", None) == "colocate" else "no engine"
        if reason is not None:
            if reason != "no engine":
                print(f"[train] vLLM engine reads the model files: {reason}", flush=True)
            return raw(self, *args, **kwargs)
        llm = module.LLM
        module.LLM = functools.partial(llm, load_format="dummy")
        try:
            result = raw(self, *args, **kwargs)
        finally:
            module.LLM = llm
        self.engine_from_pushed_weights = True  # check_first_push watches this engine
        print(f"[train] {NOTE}", flush=True)
        return result

    owner._init_vllm = init_vllm
    try:
        yield
    finally:
        owner._init_vllm = raw


def _target() -> tuple[Any, Any, Any] | None:
    """TRL's generation module, its ``VLLMGeneration`` and the plain ``_init_vllm`` (None where
    this TRL has moved them or vLLM is missing: the engine then starts as TRL wrote it)."""
    try:
        from trl.generation import vllm_generation as module  # here: kept out of the module's import
    except ImportError:
        return None
    owner = getattr(module, "VLLMGeneration", None)
    raw = vars(owner).get("_init_vllm") if owner is not None else None
    if not callable(raw) or isinstance(raw, staticmethod | classmethod) or not hasattr(module, "LLM"):
        return None
    return module, owner, raw


class EngineNotFilled(ValueError):
    """The first push left parameters of an engine that started from random weights unfilled."""


def engine_model(generation: Any) -> Any:
    """The colocated engine's model, by the path TRL's ``sync_weights`` pushes to (None where
    this vLLM or TRL has moved it)."""
    try:
        return generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    except AttributeError:
        return None


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``check_first_push``, silent."""
    check_first_push(trainer)
    return []


def check_first_push(trainer: Any) -> bool:
    """Where the engine started from random weights, watch TRL's first ``sync_weights``: the
    names vLLM's ``load_weights`` returns must cover the engine's parameters, else
    ``EngineNotFilled``. True where installed."""
    generation: Any = getattr(trainer, "vllm_generation", None)
    if not getattr(generation, "engine_from_pushed_weights", False):
        return False
    push = generation.sync_weights
    own = "sync_weights" in vars(generation)  # set on the instance by someone before us

    def first_push(*args: Any, **kwargs: Any) -> Any:
        if own:  # later pushes as before
            generation.sync_weights = push
        else:
            del generation.sync_weights
        model = engine_model(generation)
        if model is None:
            print("[train] first weight push not checked: the engine's model was not found",
                  flush=True)
            return push(*args, **kwargs)
        filled: set[str] = set()
        answers: list[bool] = []
        load = model.load_weights

        def counted(weights: Any) -> Any:
            names = load(weights)
            answers.append(names is not None)
            filled.update(names or ())
            return names

        own_load = "load_weights" in vars(model)
        model.load_weights = counted
        try:
            result = push(*args, **kwargs)
        finally:
            if own_load:
                model.load_weights = load
            else:
                del model.load_weights  # the class's method again
        print(f"[train] {verdict(filled, [n for n, _ in model.named_parameters()], answers)}",
              flush=True)
        return result

    generation.sync_weights = first_push
    return True


def verdict(filled: set[str], parameters: list[str], answers: list[bool]) -> str:
    """The rank log's line on the first push, or ``EngineNotFilled`` where it left some unfilled."""
    if not answers or not all(answers):
        return "first weight push not checked: this vLLM model's load_weights names nothing"
    if not filled <= set(parameters):  # named otherwise than named_parameters: no verdict
        return "first weight push not checked: vLLM named what it filled otherwise"
    missing = sorted(n for n in set(parameters) - filled if not n.endswith(NOT_FROM_FILES))
    if missing:
        raise EngineNotFilled(
            f"the vLLM engine started from random weights and TRL's first weight push left "
            f"{len(missing)} of {len(parameters)} of its parameters unfilled "
            f"({', '.join(missing[:3])}); set {ENV}=0 in the site profile's env to load them "
            "from the model files")
    return f"first weight push filled all {len(parameters)} parameters of the vLLM engine"
