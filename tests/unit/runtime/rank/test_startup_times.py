"""runtime/rank/observe/startup_times.py: the kernel's start time of a process and the parts of a line."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hpc_grpo.runtime.rank.observe import startup_times


def test_process_start_is_the_kernel_s() -> None:
    """A child started now reports a start within a second of now, not its interpreter's
    first line (it sleeps 1.5 s before asking) and not the fallback (-1)."""
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "import time; time.sleep(1.5); "
         "from hpc_grpo.runtime.rank.observe.startup_times import process_start_time as p; print(p(-1.0))"],
        capture_output=True, text=True, check=True, env={**os.environ}).stdout
    started = float(out)
    assert before - 0.5 <= started <= before + 1.0, (before, started)


def test_parts_follow_the_marks_in_order() -> None:
    clock = startup_times.StartupClock(main_started=100.0)
    clock.marks = [90.0, 100.0, 103.0, 140.5, 150.25, 154.0]
    line = clock.line("slurm-7.1", 30)
    assert line["parts_s"] == {"imports": 10.0, "torch_and_group": 3.0, "trainer": 37.5,
                               "prepare_and_load": 9.75, "first_step": 3.75}
    assert (line["total_s"], line["resumed_from_step"], line["attempt"]) == (64.0, 30, "slurm-7.1")


def test_a_line_before_every_mark_names_only_the_parts_taken() -> None:
    clock = startup_times.StartupClock(main_started=time.time())
    clock.mark()
    assert list(clock.line("a", None)["parts_s"]) == ["imports", "torch_and_group"]


def test_the_trainer_split_is_in_the_line_only_when_timed() -> None:
    clock = startup_times.StartupClock(main_started=100.0)
    clock.marks = [90.0, 100.0, 103.0, 140.5]
    assert "trainer_parts_s" not in clock.line("a", None)
    clock.within.update(model_load=12.344, engine_start=20.0)
    assert clock.line("a", None)["trainer_parts_s"] == {"model_load": 12.34, "engine_start": 20.0}
    assert "prepare_parts_s" not in clock.line("a", None)
    clock.preparing.update(accelerate_prepare=3.456)
    assert clock.line("a", None)["prepare_parts_s"] == {"accelerate_prepare": 3.46}


class _Engine:
    def __init__(self) -> None:
        self.started = 0

    def _init_vllm(self, sleep: float) -> str:
        time.sleep(sleep)
        self.started += 1
        return "up"


def test_timed_calls_adds_each_call_and_puts_the_originals_back() -> None:
    """Two calls add up, arguments and results pass through, an exception still counts,
    propagates and puts the original back: the very same function on the class."""
    within: dict[str, float] = {}
    original = vars(_Engine)["_init_vllm"]
    engine = _Engine()
    with startup_times.timed_calls(within, {"engine_start": (_Engine, "_init_vllm")}):
        assert engine._init_vllm(0.05) == "up" and engine._init_vllm(0.05) == "up"
        assert vars(_Engine)["_init_vllm"] is not original
    assert engine.started == 2 and 0.1 <= within["engine_start"] < 1.0
    assert vars(_Engine)["_init_vllm"] is original
    before = within["engine_start"]
    try:
        with startup_times.timed_calls(within, {"engine_start": (_Engine, "_init_vllm")}):
            engine._init_vllm("not a number")  # type: ignore[arg-type]
    except TypeError:
        pass
    else:
        raise AssertionError("the wrapped call's exception was swallowed")
    assert within["engine_start"] > before and vars(_Engine)["_init_vllm"] is original


def test_a_target_this_trl_lacks_is_left_alone() -> None:
    within: dict[str, float] = {}
    with startup_times.timed_calls(within, {"engine_start": (None, "_init_vllm"),
                                      "model_load": (_Engine, "renamed_in_a_later_trl")}):
        pass
    assert within == {} and not hasattr(_Engine, "renamed_in_a_later_trl")


def test_the_targets_exist_in_the_installed_trl_and_are_named_for_status() -> None:
    """A TRL that renames either call would silently lose the split: this names it."""
    from hpc_grpo.rundir.startup import PREPARE_PART_NAMES, TRAINER_PART_NAMES, TRAINER_STRETCHES

    colocate, server = startup_times.trainer_targets("colocate"), startup_times.trainer_targets("server")
    assert set(colocate) | set(server) | set(TRAINER_STRETCHES) == set(TRAINER_PART_NAMES)
    assert set(colocate) ^ set(server) == {"engine_start", "server_connect"}
    prepare = startup_times.prepare_targets()  # transformers' and accelerate's, as trainer.py calls them
    assert set(prepare) == set(PREPARE_PART_NAMES)
    for owner, attribute in [*colocate.values(), *server.values(), *prepare.values()]:
        assert owner is not None and callable(vars(owner).get(attribute)), (owner, attribute)


class _Descriptors:
    @staticmethod
    def still() -> str:
        return "static"

    @classmethod
    def kind(cls) -> str:
        return cls.__name__


def test_static_and_class_methods_are_left_alone() -> None:
    within: dict[str, float] = {}
    with startup_times.timed_calls(within, {"a": (_Descriptors, "still"), "b": (_Descriptors, "kind")}):
        assert _Descriptors.still() == "static" and _Descriptors().kind() == "_Descriptors"
    assert within == {}
