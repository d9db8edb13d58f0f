"""The math rewards with the real math-verify, reward keyword arguments and weights (#14)."""

from __future__ import annotations

import functools
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.data import math_rewards
from hpc_grpo.runtime.rank.data.rewards import RewardError, check_weights, resolve_rewards
from hpc_grpo.runtime.rank.setup.grpo_args import ConfigError, grpo_kwargs

GOOD = "<think>\nhalf of one\n</think>\n<answer>\n\\boxed{\\frac{1}{2}}\n</answer>"


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(("completion", "solution", "expected"), [
    ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),  # LaTeX answer, decimal reference
    ("I think \\boxed{0.5}", "$\\frac{1}{2}$", 1.0),
    ("\\boxed{\\frac{2}{4}}", "\\boxed{\\frac{1}{2}}", 1.0),  # equal values, not equal text
    ("\\boxed{3}", "\\frac{1}{2}", 0.0),
    ("the answer is 0.5", "0.5", 0.0),  # no LaTeX in the completion: not extracted (open-r1, TRL)
    ("\\boxed{42}", "42", 1.0),  # GSM8K-style plain reference
    ("\\boxed{x^2+2x+1}", "$(x+1)^2$", 1.0),
])
def test_accuracy_with_math_verify(completion: str, solution: str, expected: float) -> None:
    assert math_rewards.accuracy([completion], solution=[solution]) == [expected]
    assert math_rewards.accuracy([chat(completion)], solution=[solution]) == [expected]


def test_unparseable_reference_is_skipped_and_other_columns_pass_through() -> None:
    out = math_rewards.accuracy(["\\boxed{1}", "\\boxed{1}"], solution=["no number here", "1"],
                                trainer_state=None, log_extra=None, level=["a", "b"])
    assert out == [None, 1.0]


def test_solution_column_by_name_and_missing_column_named() -> None:
    (func,) = resolve_rewards(["builtin:accuracy"], solution_column="answer")
    assert func(["\\boxed{7}"], answer=["7"]) == [1.0]
    assert func.__name__ == "accuracy"
    with pytest.raises(math_rewards.MissingSolution, match="solution column 'answer'.*columns given: "
                                                           "question"):
        func(["\\boxed{7}"], question=["q"], trainer_state=None)


def test_format_and_tag_count() -> None:
    bad_order = "<answer>\n1\n</answer>\n<think>\nx\n</think>"
    half = "<think>\nx\n</think>\n1"
    assert math_rewards.think_format([GOOD, bad_order, half, chat(GOOD)]) == [1.0, 0.0, 0.0, 1.0]
    assert math_rewards.tag_count([GOOD, half, "", GOOD + "\n<answer>\n"]) == [1.0, 0.5, 0.0, 0.75]
    assert math_rewards.think_format.__name__ == "format"


def test_length_penalty_is_open_r1_len_reward() -> None:
    short_right, long_right = "\\boxed{2}", "so " * 10 + "\\boxed{2}"
    short_wrong, long_wrong = "\\boxed{3}", "hmm " * 20 + "\\boxed{3}"
    out = math_rewards.length_penalty([short_right, long_right, short_wrong, long_wrong],
                                      solution=["2"] * 4)
    lengths = [len(c) for c in (short_right, long_right, short_wrong, long_wrong)]
    low, high = min(lengths), max(lengths)
    lam = [0.5 - (n - low) / (high - low) for n in lengths]
    assert out == pytest.approx([lam[0], lam[1], min(0.0, lam[2]), min(0.0, lam[3])])
    assert out[0] == 0.5 and out[3] == -0.5 and out[2] == 0.0
    assert math_rewards.length_penalty(["\\boxed{1}"] * 2, solution=["1", "2"]) == [0.0, 0.0]


def test_accuracy_off_the_main_thread() -> None:
    """TRL may call rewards from a worker thread: math-verify's signal.alarm timeouts are off."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(
        math_rewards.accuracy(["\\boxed{\\frac{1}{2}}"], solution=["0.5"])))
    thread.start()
    thread.join()
    assert result == [[1.0]]


def test_reward_kwargs_are_bound_and_named_for_trl() -> None:
    from trl.trainer.utils import get_callable_name

    specs = ["builtin:length_penalty", "builtin:format"]
    funcs = resolve_rewards(specs, {"builtin:length_penalty": {"solution_column": "gold"}})
    assert funcs[1] is math_rewards.think_format  # nothing to bind: the function itself
    assert isinstance(funcs[0], functools.partial) and funcs[0].keywords == {"solution_column": "gold"}
    assert get_callable_name(funcs[0]) == "length_penalty"  # TRL's metric: rewards/length_penalty/mean
    assert funcs[0](["\\boxed{1}", "so \\boxed{1}"], gold=["1", "1"]) == [0.5, -0.5]
    pickle.loads(pickle.dumps(funcs[0]))  # TRL's async rollout worker pickles rewards


def test_reward_kwargs_problems_before_the_model_loads() -> None:
    with pytest.raises(RewardError, match="reward_kwargs for 'builtin:format', which reward_funcs"):
        resolve_rewards(["builtin:accuracy"], {"builtin:format": {"x": 1}})
    with pytest.raises(RewardError, match="reward_kwargs for 'builtin:tag_count'.*unexpected"):
        resolve_rewards(["builtin:tag_count"], {"builtin:tag_count": {"x": 1}})  # no such keyword
    with pytest.raises(RewardError, match="reward_weights has 1 values for 2 rewards"):
        check_weights([1.0], ["builtin:accuracy", "builtin:format"])


def record(**over: Any) -> RunRecord:
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": "/r", "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1,
                                "grpo_config": {"max_steps": 2}, **over})


KNOWN = ["max_steps", "bf16", "fp16", "output_dir", "seed", "use_cpu", "use_vllm", "logging_steps",
         "reward_weights", "model_init_kwargs"]


def test_weights_and_model_settings_reach_grpo_config(tmp_path: Path) -> None:
    run = record(reward_funcs=["builtin:accuracy", "builtin:format"], reward_weights=[1, 0.25],
                 model_load={"revision": "v1", "commit": "abc123", "dtype": "bfloat16",
                             "attn_implementation": "sdpa"})
    kwargs, _ = grpo_kwargs(run, tmp_path, KNOWN)
    assert kwargs["reward_weights"] == [1.0, 0.25]
    # bfloat16 asked for, no DeepSpeed: loaded float32, the fp32 master weights (model_load.py)
    assert kwargs["model_init_kwargs"] == {"revision": "abc123", "dtype": "float32",
                                           "attn_implementation": "sdpa"}
    assert "model_init_kwargs" not in grpo_kwargs(record(), tmp_path, KNOWN)[0]
    from trl import GRPOConfig

    GRPOConfig(**{**kwargs, "output_dir": str(tmp_path)})  # TRL 1.16 takes both fields


@pytest.mark.parametrize("recorded", ["float32", "bfloat16"])
def test_the_recipes_dtype_and_run_jsons_compare_by_what_they_load(tmp_path: Path,
                                                                   recorded: str) -> None:
    """run.json records the load dtype (float32 without DeepSpeed; one written before #58 the
    asked bfloat16); the recipe's model_init_kwargs asking bfloat16 loads float32 too, so it is
    no contradiction."""
    run = record(model_load={"dtype": recorded},
                 grpo_config={"max_steps": 2, "model_init_kwargs": {"dtype": "bfloat16"}})
    kwargs, _ = grpo_kwargs(run, tmp_path, KNOWN)
    assert kwargs["model_init_kwargs"] == {"dtype": "float32"}


@pytest.mark.parametrize(("over", "message"), [
    ({"reward_funcs": ["builtin:accuracy", "builtin:format"], "reward_weights": [1.0]},
     "reward_weights has 1 values for 2 rewards"),
    ({"reward_funcs": ["builtin:length"], "grpo_config": {"reward_weights": [1.0, 2.0]}},
     "reward_weights has 2 values for 1 rewards"),
    ({"reward_funcs": ["builtin:length"], "reward_weights": [1.0],
      "grpo_config": {"reward_weights": [2.0]}}, "set them in one place"),
    ({"model_load": {"dtype": "float16"}, "deepspeed": {"zero_stage": 2},  # each loads its own
      "grpo_config": {"model_init_kwargs": {"dtype": "bfloat16"}}},
     "model_init_kwargs sets dtype='bfloat16'"),
])
def test_contradictions_are_refused(tmp_path: Path, over: dict[str, Any], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        grpo_kwargs(record(**over), tmp_path, KNOWN)
