"""The test suite never writes into the user's real run index (``~/.local/share/hpc-grpo``).

It did: the cluster tests' module-scoped reference run was submitted before the per-test home
was set, and stayed in the user's index (and in every later ``hpc-grpo status``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO


@pytest.fixture(scope="module")
def module_home() -> Iterator[str]:
    """What a module-scoped fixture (set up before any per-test fixture) sees."""
    yield os.environ.get("HPC_GRPO_HOME", "")


def test_wider_scoped_fixtures_get_the_session_home(
    module_home: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert module_home.startswith(f"{tmp_path_factory.getbasetemp()}{os.sep}")


def test_a_session_writing_into_the_real_index_fails(tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    real.mkdir()
    (real / "runs.jsonl").write_text('{"run_id": "mine-0001", "run_dir": "/home/me/runs/x"}\n')
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "conftest.py").write_text("from tests.conftest import hpc_home, session_home  # noqa\n")
    (probe / "test_leak.py").write_text(textwrap.dedent(f"""\
        import json
        from pathlib import Path

        def test_leaks(tmp_path):
            index = Path({str(real / "runs.jsonl")!r})
            with index.open("a") as handle:
                handle.write(json.dumps({{"run_id": "t-0001", "run_dir": str(tmp_path)}}) + "\\n")
        """))
    env = {**os.environ, "HPC_GRPO_HOME": str(real), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'basetemp'}", str(probe)],
        cwd=probe, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0, proc.stdout
    assert "wrote 1 run(s) into the real run index" in proc.stdout, proc.stdout
    assert "mine-0001" not in proc.stdout.split("real run index")[-1]  # the user's own line
