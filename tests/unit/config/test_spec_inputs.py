"""Job settings refused while building the spec, in one line each, where the ranks would
otherwise fail (or train on the wrong thing) after the queue wait."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.spec import build_spec, parse_set
from hpc_grpo.errors import UserError, UserErrors


def refused(recipe: dict[str, Any], sets: list[str], flags: dict[str, Any]) -> UserError:
    """The one problem build_spec finds."""
    with pytest.raises(UserError) as info:
        build_spec(recipe, parse_set(sets), flags)
    assert not isinstance(info.value, UserErrors), info.value.lines()
    return info.value


def render_error(*args: str) -> str:
    """Render on a Slurm profile, expect exit 2 and one error line: that line."""
    result = CliRunner().invoke(main, ["render", "--site", "h100-pyxis", *args],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# --- empty names -----------------------------------------------------------------------------

@pytest.mark.parametrize(("recipe", "sets", "flags", "field"), [
    ({"model": "m"}, [], {"dataset": ""}, "--dataset"),  # --dataset "$UNSET"
    ({"model": "m"}, [], {"dataset": "  "}, "--dataset"),
    ({"model": "m"}, ["dataset="], {}, "--set: dataset"),
    ({"model": "m", "dataset_name": ""}, [], {}, "recipe: dataset"),
    ({"model": "m"}, [], {"model": ""}, "--model"),
    ({"model_name_or_path": " "}, [], {}, "recipe: model"),
])
def test_an_empty_model_or_dataset_name_is_refused(recipe: dict[str, Any], sets: list[str],
                                                   flags: dict[str, Any], field: str) -> None:
    """As a path "" is the current directory: the run trained on (or loaded) whatever folder
    the command ran in."""
    error = refused(recipe, sets, flags)
    assert error.field == field
    assert "would mean the current directory" in error.message
    assert "hub id" in error.hint


def test_an_empty_dataset_is_refused_before_the_plan_on_a_slurm_site() -> None:
    line = render_error("--model", "builtin:tiny", "--dataset", "")
    assert line.startswith("error: --dataset: an empty dataset name")


# --- seeds -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("sets", "flags", "field", "seed"), [
    ([], {"seed": -1}, "--seed", -1),
    (["seed=-3"], {}, "--set: seed", -3),
    ([], {"seed": 99999999999}, "--seed", 99999999999),
    ([], {"seed": 2**32}, "--seed", 2**32),
])
def test_a_seed_numpy_refuses_is_refused(sets: list[str], flags: dict[str, Any], field: str,
                                         seed: int) -> None:
    """transformers' set_seed hands the seed to numpy, which raises 'Seed must be between 0
    and 2**32 - 1' on every rank after the queue wait."""
    error = refused({"model": "m"}, sets, flags)
    assert error.field == field
    assert error.message == f"seed must be between 0 and 2**32 - 1 (numpy's seed range), got {seed}"


def test_seeds_numpy_takes_pass_and_data_seed_is_held_to_the_same_range() -> None:
    for seed in (0, 42, 2**32 - 1):
        assert build_spec({"model": "m"}, {}, {"seed": seed}).seed == seed
    error = refused({"model": "m", "data_seed": -1}, [], {})
    assert error.field == "recipe: data_seed" and "between 0 and 2**32 - 1" in error.message


def test_the_last_rank_s_seed_must_be_in_numpy_s_range_too() -> None:
    """TRL seeds each process with seed + its rank: on 8 GPUs the largest seed is 2**32 - 8."""
    line = render_error("--model", "builtin:tiny", "--seed", str(2**32 - 7))
    assert line == ("error: seed: seed 4294967289 + rank 7 is past numpy's 2**32 - 1: TRL seeds "
                    "each of the 8 training processes with seed + its rank (hint: --seed "
                    "4294967288 or lower)")
    result = CliRunner().invoke(main, ["render", "--site", "h100-pyxis", "--model",
                                       "builtin:tiny", "--seed", str(2**32 - 8)])
    assert result.exit_code == 0, result.stderr


# --- rewards ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("recipe", "sets", "flags", "field", "words"), [
    ({"model": "m", "reward_weights": [1.0, 2.0]}, [], {}, "recipe: reward_weights",
     "2 weights for 1 reward (builtin:length)"),  # the default reward counts
    ({"model": "m"}, ["reward_weights=[1, 0.5]"], {"reward_funcs": ["accuracy"]},
     "--set: reward_weights", "2 weights for 1 reward (builtin:accuracy)"),
    ({"model": "m", "reward_weights": [1.0]}, [], {"reward_funcs": ["accuracy", "format"]},
     "recipe: reward_weights", "1 weight for 2 rewards (builtin:accuracy, builtin:format)"),
    ({"model": "m"}, ["reward_funcs=[]"], {}, "--set: reward_funcs",
     "lists no reward: GRPO needs at least one"),
    ({"model": "m", "reward_funcs": []}, [], {}, "recipe: reward_funcs", "lists no reward"),
    ({"model": "m"}, ["reward_weights=[.nan]"], {}, "--set: reward_weights",
     "must be finite numbers, got [nan]"),
    ({"model": "m"}, ["reward_weights=[1, -.inf]"], {"reward_funcs": ["accuracy", "format"]},
     "--set: reward_weights", "must be finite numbers, got [1.0, -inf]"),
])
def test_reward_problems_the_ranks_would_find_are_refused(
        recipe: dict[str, Any], sets: list[str], flags: dict[str, Any], field: str,
        words: str) -> None:
    """The ranks refuse an empty reward_funcs (rewards.py) and a weight count unlike the
    rewards' (grpo_args.py, TRL) only after the queue wait; a NaN weight refuses nothing."""
    error = refused(recipe, sets, flags)
    assert error.field == field and words in error.message, error.one_line()


def test_weights_that_fit_the_rewards_pass() -> None:
    spec = build_spec({"model": "m", "reward_weights": [1, -0.5]}, {},
                      {"reward_funcs": ["accuracy", "format"]})
    assert spec.reward_weights == (1.0, -0.5)  # a negative weight is a penalty: TRL takes it
    assert build_spec({"model": "m", "reward_weights": [1.0, 2.0]},
                      parse_set(["reward_weights=[]"]), {}).reward_weights == ()


def test_a_weight_count_unlike_the_rewards_is_refused_on_a_slurm_site() -> None:
    line = render_error("--model", "builtin:tiny", "--set", "reward_weights=[1.0, 2.0]")
    assert line == ("error: --set: reward_weights: 2 weights for 1 reward (builtin:length) (hint: "
                    "one weight per reward, e.g. --set reward_weights=[1.0]; --set "
                    "reward_weights=[] weighs every reward 1)")


def test_premise_trl_wants_one_weight_per_reward_and_at_least_one_reward() -> None:
    """Why reward_problems refuses: TRL's GRPOTrainer raises on a weight count unlike the
    rewards' and on no reward at all (and multiplies the rewards by the weights, so a NaN one
    spreads). If TRL changes this, revisit config/spec_checks.py reward_problems."""
    import inspect

    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    source = inspect.getsource(grpo.GRPOTrainer.__init__)
    assert "if len(args.reward_weights) != len(reward_funcs):" in source
    assert "if not self.reward_funcs:" in source
    assert "torch.ones(len(reward_funcs)" in source  # no weights: every reward weighs 1
