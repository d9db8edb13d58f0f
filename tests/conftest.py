"""Shared fixtures: an isolated run index, golden-file updating, and the sandbox cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SANDBOX = REPO / "tests" / "cluster" / "sandbox.sh"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/* from the current templates")


@pytest.fixture(autouse=True)
def hpc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own run index and user site directory."""
    home = tmp_path / "hpc-home"
    monkeypatch.setenv("HPC_GRPO_HOME", str(home))
    monkeypatch.setenv("HPC_GRPO_SITES", str(tmp_path / "sites"))
    return home


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _cluster_up() -> bool:
    return subprocess.run(["bash", str(SANDBOX), "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def sandbox_cluster() -> Iterator[None]:
    """The real Slurm cluster (4 namespace nodes). Started if needed; in CI it must come up."""
    in_ci = os.environ.get("CI") == "true"
    reason = ""
    if os.geteuid() != 0:
        reason = "the sandbox Slurm cluster needs root (network namespaces, daemons)"
    elif shutil.which("ip") is None and not in_ci:
        reason = "iproute2 missing"
    if reason:
        if in_ci:
            pytest.fail(f"CI needs the sandbox cluster: {reason}")
        pytest.skip(reason)
    started_here = False
    if not _cluster_up():
        proc = subprocess.run(["bash", str(SANDBOX), "start"], capture_output=True, text=True)
        if proc.returncode != 0:
            message = f"sandbox cluster did not start:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            if in_ci:
                pytest.fail(message)
            pytest.skip(message)
        started_here = True
    yield
    if started_here and os.environ.get("HPC_GRPO_KEEP_SANDBOX") != "1":
        subprocess.run(["bash", str(SANDBOX), "stop"], capture_output=True)
