"""What the CLI's reading commands load: status over a thousand runs on a busy login node must
not pay for Jinja, YAML or the planner (the api module imports them for submit and plan)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("jinja2", "yaml", "hpc_grpo.planner", "hpc_grpo.scheduler.render", "hpc_grpo.export")


def _loaded(module: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after importing ``module``."""
    code = (f"import json, sys, {module}; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


def test_the_run_side_loads_nothing_heavy() -> None:
    assert _loaded("hpc_grpo.api_runs") == []


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_the_reading_commands_import_the_run_side_alone(command: str) -> None:
    """The command's function imports api_runs, not api (read from cli.py's source)."""
    import inspect

    from hpc_grpo import cli

    source = inspect.getsource(getattr(cli, command).callback)
    assert "from hpc_grpo import api_runs" in source and "from hpc_grpo import api\n" not in source


def test_the_check_sees_a_heavy_import() -> None:
    """The check can fail: the planning side does load them."""
    assert "jinja2" in _loaded("hpc_grpo.api")
