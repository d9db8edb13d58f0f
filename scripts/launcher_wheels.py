"""Download the launcher's dependency wheels (pyproject's base dependencies, at the versions this
venv has) into a wheelhouse, so tests/slow/test_packaging.py can install the built hpc-grpo wheel
into a fresh venv offline, with nothing else: a venv that sees this one's torch would prove
nothing about `pip install hpc-grpo` on a login node.

scripts/setup runs it (network once); the test runs it itself only when the wheelhouse is missing.
Usage: python scripts/launcher_wheels.py [DIR]   (default: $HPC_GRPO_WHEELHOUSE or <venv>/launcher-wheels)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def wheelhouse() -> Path:
    return Path(os.environ.get("HPC_GRPO_WHEELHOUSE") or Path(sys.prefix) / "launcher-wheels")


def base_dependencies() -> list[str]:
    """The launcher install's requirements, as pyproject declares them."""
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def download(target: Path) -> None:
    """Every base dependency and what it pulls, pinned to this venv's versions (the tested set)."""
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout
    pins = "\n".join(line for line in freeze.splitlines() if "==" in line and "+" not in line)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write(pins + "\n")
        constraints.flush()
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--only-binary", ":all:", "-d", str(target), "-c", constraints.name,
                        *base_dependencies()], check=True)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else wheelhouse()
    download(out)
    print(f"launcher wheels: {len(list(out.glob('*.whl')))} in {out}")
