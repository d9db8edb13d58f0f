"""Limits on what a recipe or profile can cost (#58): a 10 MB recipe of 95,000 unknown keys
printed nothing for 300 s, a 1 MB one took 17.5 s and printed 9,453 error lines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config import spec as spec_module
from hpc_grpo.config.site import load_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.config.strict import MAX_YAML_BYTES, read_yaml
from hpc_grpo.errors import UserError, UserErrors


def _keys(path: Path, size: int) -> Path:
    lines, total, i = [], 0, 0
    while total <= size:
        line = f"unknown_key_{i}: {i}\n"
        lines.append(line)
        total += len(line)
        i += 1
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("what", ["recipe", "site profile"])
def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path, what: str) -> None:
    path = _keys(tmp_path / "big.yaml", MAX_YAML_BYTES)
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        read_yaml(path, what) if what == "recipe" else load_site(str(path), [])
    assert time.monotonic() - started < 5  # not parsed: PyYAML takes seconds a MiB
    assert f"{what} {path} is over 1 MiB, the most a {what} may be" in caught.value.one_line()


def test_a_recipe_over_the_limit_is_one_line_of_the_cli(tmp_path: Path) -> None:
    path = _keys(tmp_path / "big.yaml", 10 * MAX_YAML_BYTES)
    result = CliRunner().invoke(main, ["plan", "--site", "local", "--recipe", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: recipe: recipe {path} is over 1 MiB, the most a recipe may be "
        "(hint: is it the recipe? a recipe is a page of keys)"]


def test_many_problems_list_the_first_ones_and_a_count() -> None:
    problems = [UserError(f"problem {i}", field="recipe") for i in range(UserErrors.LISTED + 7)]
    lines = UserErrors(problems).lines()
    assert lines[:2] == ["error: recipe: problem 0", "error: recipe: problem 1"]
    assert len(lines) == UserErrors.LISTED + 1 and lines[-1] == "error: ... and 7 more"
    assert UserErrors(problems).message.endswith("recipe: problem 19; ... and 7 more")
    assert len(UserErrors(problems[:3]).lines()) == 3


def test_thousands_of_unknown_keys_cost_twenty_did_you_means(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = spec_module.unknown_key_hint

    def counted(key: str, known: frozenset[str]) -> str:
        calls.append(key)
        return real(key, known)

    monkeypatch.setattr(spec_module, "unknown_key_hint", counted)
    recipe = {"model": "m", "num_generation": 4, **{f"unknown_key_{i}": i for i in range(5000)}}
    with pytest.raises(UserErrors) as caught:
        build_spec(recipe, {}, {})
    assert len(calls) == UserErrors.LISTED
    lines = caught.value.lines()
    assert "did you mean 'num_generations'" in lines[0]
    assert lines[-1] == f"error: ... and {5001 - UserErrors.LISTED} more"
