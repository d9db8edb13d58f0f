"""The node task the config-error tests run, shared with the watchdog tests (moved out of
test_config_error_node.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from tests.unit.nodefake import fake_node, minimal_run


def _node_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               **state: Any) -> tuple[Path, list[list[str]]]:
    """A node task under Slurm job 7 whose torchrun stand-in leaves ``state`` and exits 1."""
    run_dir = minimal_run(tmp_path)

    def leaves_state() -> int:
        rundir.update_state(run_dir, attempt="slurm-7.0", **state)
        return 1

    called = fake_node(monkeypatch, "7", leaves_state)
    return run_dir, called
