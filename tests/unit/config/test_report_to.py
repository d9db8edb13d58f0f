"""report_to is checked on the login node (#16): a name transformers does not know was accepted
by `plan`/`submit` and refused by TRL on every rank after the queue wait. The launcher's list is
written out (no transformers on a login node); here it is held to the installed transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.grpo import REPORT_TO, REPORT_TO_ALONE, check_value, field_types

VALUES: list[Any] = [
    "wandb", "tensorboard", "all", "none", ["none"], ["all"], [], ["wandb", "tensorboard"],
    "bogus", "WandB", ["wandb", "tensorbord"], ["wandb", "none"], ["all", "wandb"],
]


def _ours(value: Any) -> str:
    return check_value("report_to", value, field_types()["report_to"])[1]


def test_the_list_is_transformers_list() -> None:
    utils = pytest.importorskip("transformers.integrations.integration_utils")
    assert sorted(REPORT_TO) == sorted(utils.INTEGRATION_TO_CALLBACK)
    assert not set(REPORT_TO_ALONE) & set(REPORT_TO)


@pytest.mark.parametrize("value", VALUES, ids=str)
def test_refused_exactly_where_transformers_refuses(value: Any, tmp_path: Path) -> None:
    """transformers' own path: TrainingArguments normalises report_to, the Trainer then asks
    get_reporting_integration_callbacks, which raises for a name it does not know."""
    transformers = pytest.importorskip("transformers")
    utils = pytest.importorskip("transformers.integrations.integration_utils")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=value)
    try:
        utils.get_reporting_integration_callbacks(args.report_to)
        theirs = ""
    except ValueError as err:
        theirs = str(err)
    assert bool(_ours(value)) == bool(theirs), (value, _ours(value), theirs)


def test_a_typo_gets_a_suggestion() -> None:
    _, problem, hint = check_value("report_to", ["wandb", "tensorbord"], field_types()["report_to"])
    assert "'tensorbord'" in problem and hint == "did you mean 'tensorboard'?"
    _, problem, _ = check_value("report_to", ["wandb", "none"], field_types()["report_to"])
    assert "'none' stands only alone" in problem


def test_plan_refuses_an_unknown_tracker_before_anything_is_queued() -> None:
    args = ["plan", "--site", "sandbox", "--model", "builtin:tiny", "--json", "--set"]
    result = CliRunner().invoke(main, [*args, "report_to=bogus"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "report_to: 'bogus' is not a tracker transformers knows" in lines[0]
    assert CliRunner().invoke(main, [*args, "report_to=[wandb,tensorboard]"]).exit_code == 0
