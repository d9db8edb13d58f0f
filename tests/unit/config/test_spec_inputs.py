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
