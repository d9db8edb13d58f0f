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
