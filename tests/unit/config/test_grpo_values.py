"""GRPOConfig values checked on the login node: kinds and allowed values from the shipped field
list, ranges from TRL's documentation, every problem reported at once."""

from __future__ import annotations

from typing import Any

import pytest

from hpc_grpo.config.grpo import (
    PLAN_NEEDS,
    RANGES,
    SEED_MAX,
    check_value,
    check_values,
    field_types,
)
from hpc_grpo.config.spec import build_spec, parse_set
from hpc_grpo.errors import UserError, UserErrors


def one(name: str, value: Any) -> tuple[Any, str, str]:
    return check_value(name, value, field_types()[name])


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("max_steps", 50, 50),
    ("max_steps", -1, -1),  # TRL's "train num_train_epochs epochs", as open-r1 recipes write it
    ("max_steps", 1e3, 1000),  # `--set max_steps=1e3` reads as a float
    ("learning_rate", 1, 1.0),
    ("save_steps", 0.25, 0.25),  # below 1: a fraction of the run
    ("bf16_full_eval", True, True),
    ("report_to", "none", "none"),
    ("report_to", ["wandb", "tensorboard"], ["wandb", "tensorboard"]),
    ("run_name", 2024, "2024"),
    ("scale_rewards", False, False),  # TRL maps True/False to group/none
    ("scale_rewards", "batch", "batch"),
    ("save_strategy", False, "no"),  # YAML 1.1 reads `save_strategy: no` (and --set ...=no) as false
    ("eval_strategy", "no", "no"),
    ("pad_to_multiple_of", "auto", "auto"),
    ("pad_to_multiple_of", 64, 64),
    ("save_total_limit", None, None),
    ("reward_weights", [1, 0.5], [1.0, 0.5]),
    ("lr_scheduler_type", "cosine", "cosine"),
    ("top_k", 0, 0),
    ("data_seed", 0, 0), ("data_seed", 2**32 - 1, 2**32 - 1), ("data_seed", None, None),
])
def test_accepted_values_come_out_as_trl_takes_them(name: str, value: Any, expected: Any) -> None:
    out, problem, _ = one(name, value)
    assert (out, problem) == (expected, "")
    assert type(out) is type(expected)


@pytest.mark.parametrize(("name", "value", "words"), [
    ("max_steps", "abc", "expected int, got str 'abc'"),
    ("max_steps", 2.5, "expected int, got float 2.5"),
    ("max_steps", True, "expected int, got bool True"),
    ("learning_rate", "fast", "expected float, got str 'fast'"),
    ("learning_rate", None, "expected float, got null"),
    ("gradient_checkpointing", "yes please", "expected bool"),
    ("reward_weights", ["a"], "expected a list of float or null"),
    ("include_for_metrics", "loss", "expected a list of str"),
    ("model_init_kwargs", 3, "expected str or a mapping or null"),
])
def test_wrong_kinds_name_the_expected_type(name: str, value: Any, words: str) -> None:
    _, problem, _ = one(name, value)
    assert words in problem


@pytest.mark.parametrize(("name", "value"), [
    ("max_steps", 0), ("max_steps", -2), ("learning_rate", 0), ("learning_rate", -1e-5),
    ("num_generations", 1), ("per_device_train_batch_size", 0), ("gradient_accumulation_steps", 0),
    ("max_completion_length", 0), ("beta", -0.01), ("temperature", 0), ("top_p", 0),
    ("top_p", 1.5), ("min_p", 2), ("adam_beta2", 1), ("num_train_epochs", 0), ("save_steps", 0),
    ("num_iterations", 0), ("top_k", -1), ("epsilon", -0.2),
    ("data_seed", -1), ("data_seed", 2**32),  # numpy's seed range
    ("learning_rate", float("inf")), ("max_grad_norm", float("inf")),
    ("warmup_steps", float("inf")), ("beta", float("-inf")),
])
def test_out_of_range_numbers_are_refused(name: str, value: Any) -> None:
    _, problem, _ = one(name, value)
    assert problem.startswith("must be ") and problem.endswith(f"got {value!r}") or \
        problem.endswith(f"got {float(value)!r}"), problem


def test_every_range_refuses_infinity_as_it_refuses_nan() -> None:
    """No comparison holds for NaN, so every range refused it; infinity passed "> 0" and
    ">= 0" (learning_rate, max_grad_norm, warmup_steps: transformers' int() of it raises)."""
    floats = [name for name in RANGES if "float" in field_types()[name].kinds]
    assert {"learning_rate", "max_grad_norm", "warmup_steps", "beta"} <= set(floats)
    for name in floats:
        for value in (float("nan"), float("inf"), float("-inf")):
            _, problem, _ = one(name, value)
            assert problem.startswith("must be finite and "), (name, value, problem)
    _, problem, hint = one("max_grad_norm", float("inf"))
    assert problem == "must be finite and 0 or more, got inf"
    assert hint.startswith("max_grad_norm: 0 turns gradient clipping off")
    with pytest.raises(UserError) as info:  # as typed: YAML's .inf
        build_spec({"model": "m"}, parse_set(["learning_rate=.inf"]), {})
    assert info.value.lines() == [
        "error: --set: learning_rate: must be finite and greater than 0, got inf"]


def test_premise_transformers_clips_gradients_only_above_a_max_grad_norm_of_0() -> None:
    """The hint for an infinite max_grad_norm (config/grpo.py NOT_FINITE_HINTS): transformers'
    training loop clips only where max_grad_norm > 0. If that changes, revisit the hint."""
    import inspect

    trainer = pytest.importorskip("transformers.trainer")
    assert "if self.args.max_grad_norm > 0:" in inspect.getsource(trainer.Trainer._run_epoch)


def test_strings_trl_fixes_get_a_did_you_mean() -> None:
    _, problem, hint = one("loss_type", "drgrpo")
    assert problem == "'drgrpo' is not one of TRL's values" and hint == "did you mean 'dr_grpo'?"
    _, problem, hint = one("lr_scheduler_type", "cosin")
    assert "not one of" in problem and "'cosine'" in hint
    assert one("scale_rewards", "groups")[2] == "did you mean 'group'?"


def test_null_where_the_plan_computes_with_the_value() -> None:
    for name in PLAN_NEEDS:
        assert "none" in field_types()[name].kinds  # TRL would take it; the plan cannot
        _, problem, _ = one(name, None)
        assert problem.startswith("must be a number")


def test_every_range_names_a_numeric_field() -> None:
    """A field TRL renames or drops must not leave a silent rule behind."""
    for name in RANGES:
        assert name in field_types(), name
        assert {"int", "float"} & set(field_types()[name].kinds), name


def test_check_values_keeps_unknown_keys_and_names_each_source() -> None:
    values, problems = check_values({"max_steps": "abc", "beta": -1, "learning_rate": 1,
                                      "not_a_field": object},
                                     {"max_steps": "--set", "beta": "recipe"})
    assert values["learning_rate"] == 1.0 and values["not_a_field"] is object
    assert [p.field for p in problems] == ["--set: max_steps", "recipe: beta"]


def test_build_spec_reports_every_problem_at_once() -> None:
    recipe = {"model": "m", "per_device_train_batch_size": 0, "loss_type": "grpoo",
              "num_generation": 4, "nodes": "two"}
    sets = parse_set(["max_steps=abc", "learning_rate=0", "deepspeed=/x"])
    with pytest.raises(UserErrors) as info:
        build_spec(recipe, sets, {})
    lines = info.value.lines()
    assert all(line.startswith("error: ") for line in lines)
    for words in ("recipe: unknown key 'num_generation'", "--set: deepspeed",
                  "recipe: per_device_train_batch_size: must be at least 1, got 0",
                  "recipe: loss_type: 'grpoo'", "--set: max_steps: expected int",
                  "--set: learning_rate: must be greater than 0", "nodes: expected int"):
        assert sum(words in line for line in lines) == 1, (words, lines)
    assert len(lines) == 7


def test_set_overrides_a_bad_recipe_value_and_values_are_coerced() -> None:
    spec = build_spec({"model": "m", "max_steps": 0}, parse_set(["max_steps=1e2",
                                                                 "learning_rate=1"]), {})
    assert spec.grpo == {"max_steps": 100, "learning_rate": 1.0}
    assert type(spec.grpo["max_steps"]) is int


def test_a_single_problem_stays_one_user_error() -> None:
    with pytest.raises(UserError) as info:
        build_spec({"model": "m"}, parse_set(["max_steps=abc"]), {})
    assert not isinstance(info.value, UserErrors)
    assert info.value.lines() == ["error: --set: max_steps: expected int, got str 'abc'"]


def test_true_is_not_a_strategy_and_false_stays_false_where_no_is_no_choice() -> None:
    assert "got bool True" in one("save_strategy", True)[1]
    assert "got bool False" in one("lr_scheduler_type", False)[1]


def test_save_strategy_best_is_refused_with_the_way_to_the_best_checkpoint() -> None:
    for typed in ("best", "Best", "BEST", " best"):
        _, problem, hint = one("save_strategy", typed)
        assert "no evaluation during training" in problem, typed
        assert "--best reward_mean" in hint and "save_total_limit" in hint, typed
    for fine in ("steps", "epoch", "no"):
        assert one("save_strategy", fine)[1] == "", fine
    _, problem, hint = one("save_strategy", "bset")  # a typo is not led to the refused value
    assert "not one of TRL's values" in problem and "best" not in hint, hint


def test_schedulers_stepped_only_by_an_evaluation_are_refused() -> None:
    """reduce_lr_on_plateau and greedy never step without an evaluation (transformers' training
    loop skips them): the run would train at the initial learning rate throughout."""
    for typed in ("reduce_lr_on_plateau", "greedy", "Greedy"):
        _, problem, hint = one("lr_scheduler_type", typed)
        assert "only after an evaluation" in problem and "constant" in hint, typed
    for fine in ("linear", "cosine", "constant_with_warmup", "cosine_with_min_lr"):
        assert one("lr_scheduler_type", fine)[1] == "", fine


def test_premise_transformers_decides_a_best_save_and_a_plateau_step_on_evaluation() -> None:
    """Why 'best' and the evaluation-stepped schedulers are refused (config/grpo.py): in the
    training loop the step-end callbacks (the disk check, the agreed stop save) run before
    _maybe_log_save_evaluate, which sets should_save from the evaluation under 'best'; the
    Trainer refuses 'best' without metric_for_best_model (a key hpc-grpo drops); and the loop
    skips ReduceLROnPlateau and GreedyLR, which only an evaluation steps. If transformers
    changes any of these, revisit the rules."""
    import inspect

    trainer = pytest.importorskip("transformers.trainer")
    loop = inspect.getsource(trainer.Trainer._run_epoch)  # one epoch of the training loop
    assert loop.index("callback_handler.on_step_end") < loop.index("self._maybe_log_save_evaluate(")
    assert "(torch.optim.lr_scheduler.ReduceLROnPlateau, GreedyLR)" in loop
    decide = inspect.getsource(trainer.Trainer._maybe_log_save_evaluate)
    assert "self.control.should_save = is_new_best_metric" in decide
    assert decide.index("if self.control.should_evaluate:") < \
        decide.index("self.control.should_save = is_new_best_metric")
    assert "must be provided when using 'best' save_strategy" in \
        inspect.getsource(trainer.Trainer._validate_args)


def test_premise_every_rank_hands_the_seed_plus_its_rank_to_numpy() -> None:
    """Why seeds are held to [0, 2**32 - 1] and seed + the last rank too (config/grpo.py SEED,
    planner/topology.py check_rank_seeds): numpy refuses any other seed, transformers' set_seed passes the
    seed to it, and TRL's GRPOTrainer seeds every process with accelerate's set_seed(seed,
    device_specific=True), which adds the process index. If any of this changes, revisit."""
    import inspect

    np = pytest.importorskip("numpy")
    np.random.seed(SEED_MAX)
    for bad in (-1, SEED_MAX + 1):
        with pytest.raises(ValueError, match="between 0 and 2\\*\\*32 - 1"):
            np.random.seed(bad)
    trainer_utils = pytest.importorskip("transformers.trainer_utils")
    assert "np.random.seed(seed)" in inspect.getsource(trainer_utils.set_seed)
    accelerate_random = pytest.importorskip("accelerate.utils.random")
    source = inspect.getsource(accelerate_random.set_seed)
    assert "seed += AcceleratorState().process_index" in source
    assert "np.random.seed(seed)" in source
    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    assert "set_seed(args.seed, device_specific=True)" in inspect.getsource(grpo.GRPOTrainer)
    assert grpo.set_seed is accelerate_random.set_seed
