"""Shared fixtures: an isolated run index, golden-file updating, the sandbox cluster, and the one
fake world of fake Slurm binaries (``fake``; tests/unit/slurmfake.py). A module that needs the
binaries to answer more for every test overrides ``fake`` with a fixture of the same name that
takes this one and adds its answers."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.unit.slurmfake import FakeSlurm, install

SANDBOX = REPO / "tests" / "cluster" / "sandbox.sh"

# Helper modules whose asserts run inside tests (moved out of test modules, where pytest rewrote
# them): rewritten too, so that their failures still show the values.
pytest.register_assert_rewrite(
    "tests.gpu.checkpoint_resume_helpers", "tests.gpu.gpu_helpers", "tests.gpu.lora_7b_helpers",
    "tests.gpu.resume_7b_helpers", "tests.unit.cli.cli_errors_helpers",
    "tests.unit.planner.calibration_cases", "tests.unit.planner.planner_helpers",
    "tests.unit.planner.speed_choice_helpers")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/* from the current templates")


def _index_lines(home: Path) -> set[str]:
    try:
        return set((home / "runs.jsonl").read_text(errors="replace").splitlines())
    except OSError:
        return set()


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The whole session, its module- and session-scoped fixtures and every process they start
    (CLI calls, sbatch'd jobs), gets a run index of its own, never the user's.

    The per-test ``hpc_home`` alone did not cover them: pytest sets up wider-scoped fixtures
    first, so the cluster tests' module-scoped reference run was submitted with the user's real
    HPC_GRPO_HOME and indexed there. At the end, the user's real index must name no run of this
    session (lines written by others meanwhile, e.g. another checkout's tests, are not ours).
    """
    real = Path(os.environ.get("HPC_GRPO_HOME", "~/.local/share/hpc-grpo")).expanduser()
    before = _index_lines(real)
    home = tmp_path_factory.mktemp("session-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("HPC_GRPO_HOME", str(home))
    patch.setenv("HPC_GRPO_SITES", str(home / "sites"))
    yield home
    patch.undo()
    ours = f"{tmp_path_factory.getbasetemp()}{os.sep}"
    leaked = [line for line in _index_lines(real) - before if ours in line]
    if leaked:
        pytest.fail(f"tests wrote {len(leaked)} run(s) into the real run index {real}: {leaked[:3]}")


@pytest.fixture(autouse=True)
def hpc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_home: Path) -> Path:
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


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """sbatch, squeue, sacct, scontrol, scancel, srun, sinfo, salloc for this test only: sbatch
    answers "Submitted batch job 4242", the others print nothing until told (``answer``), and
    every call is recorded (``calls``)."""
    return install(tmp_path, monkeypatch)
