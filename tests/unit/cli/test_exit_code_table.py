"""The exit-code table of docs/cli.md (#16) names every command that can exit 1: found in the
commands' own source (a ``sys.exit`` of anything but 2, the bad-input code), so a command that
gains a ``--wait`` is not left out of the table again, as ``resume --wait`` was."""

from __future__ import annotations

import importlib.util
import inspect
import re

import click

from hpc_grpo.cli import main
from tests.paths import REPO


def _exit_codes() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", REPO / "scripts" / "gen_cli_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {code: where for code, _meaning, where in module.EXIT_CODES}


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[f"{prefix}{name}"] = command
        if isinstance(command, click.Group):
            found.update(_commands(command, f"{prefix}{name} "))
    return found


def _may_exit_1(command: click.Command) -> bool:
    """Its body passes sys.exit something other than the literal 2 (user_errors' code)."""
    if command.callback is None:
        return False
    source = inspect.getsource(inspect.unwrap(command.callback))
    return re.search(r"sys\.exit\((?!2\))", source) is not None


def test_every_command_that_can_exit_1_is_in_the_table() -> None:
    exiting = sorted(name for name, command in _commands(main).items() if _may_exit_1(command))
    assert {"doctor", "submit"} <= set(exiting)  # the detector sees the ones known to exit 1
    row = _exit_codes()["1"]
    missing = [name for name in exiting if f"`{name}" not in row]
    assert not missing, f"exit 1 row of scripts/gen_cli_docs.py EXIT_CODES lacks {missing}: {row}"
