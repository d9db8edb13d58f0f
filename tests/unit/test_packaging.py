"""The launcher wheel: light dependencies (no torch on a login node), data files included."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(REPO)], check=True, capture_output=True)
    return next(out.glob("hpc_grpo-*.whl"))


def test_wheel_carries_templates_profiles_and_field_list(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("hpc_grpo/sbatch_templates/slurm.sbatch.j2", "hpc_grpo/site_configs/sandbox.yaml",
                   "hpc_grpo/grpo_fields.txt", "hpc_grpo/runtime/node/task.py",
                   "hpc_grpo/runs/track.py", "hpc_grpo/runs/registry.py"):
        assert needed in names


def test_base_install_needs_no_training_stack(wheel: Path) -> None:
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    base = [r for r in requires if "extra ==" not in r]
    assert base and not any(p in r for r in base for p in ("torch", "trl", "vllm", "deepspeed"))
    assert any("trl" in r and "runtime" in r for r in requires)
    assert any("vllm" in r and "extra == 'vllm'" in r for r in requires)


