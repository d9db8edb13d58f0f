"""The launcher wheel: light dependencies (no torch on a login node), data files included.

The sdist is built first and the wheel from it (so the sdist is complete), and the wheel is
installed into a fresh venv that holds nothing but it and the launcher's own dependencies, from a
wheelhouse of the versions the dev venv has (scripts/launcher_wheels.py; no network when the
wheelhouse exists). ~10 s in all, so it runs with the unit tests.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from tests.paths import REPO

TRAINING = ("torch", "trl", "transformers", "vllm", "deepspeed")  # only on the compute nodes
TRACKERS = ("wandb", "tensorboard", "mlflow", "trackio")  # report_to's extras, nodes only too


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(out)],
                   cwd=REPO, check=True, capture_output=True)
    sdist = next(out.glob("hpc_grpo-*.tar.gz"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(sdist)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    return next(dist.glob("hpc_grpo-*.whl"))


def test_wheel_carries_templates_profiles_and_field_list(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("hpc_grpo/grpo_fields.txt", "hpc_grpo/runtime/node/task.py",
                   "hpc_grpo/runs/track.py", "hpc_grpo/runs/registry.py"):
        assert needed in names
    for folder in ("sbatch_templates", "site_configs"):  # every one, not a sample
        shipped = sorted(p.name for p in (REPO / folder).iterdir() if p.is_file())
        assert shipped and all(f"hpc_grpo/{folder}/{name}" in names for name in shipped), folder


def test_base_install_needs_no_training_stack(wheel: Path) -> None:
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    base = [r for r in requires if "extra ==" not in r]
    names = [Requirement(r.split(":", 1)[1]).name.lower() for r in base]
    assert names and not set(names) & {*TRAINING, *TRACKERS}, names
    assert any("trl" in r and "runtime" in r for r in requires)
    assert any("vllm" in r and "extra == 'vllm'" in r for r in requires)
    for tracker in TRACKERS:  # each is an extra of its own, so the check above is not vacuous
        assert any(r.startswith(f"Requires-Dist: {tracker}") and f"extra == '{tracker}'" in r
                   for r in requires), tracker




# ---- the wheel in a fresh venv with nothing but the launcher's dependencies -----------------

def _wheelhouse() -> Path:
    spec = importlib.util.spec_from_file_location("launcher_wheels",
                                                  REPO / "scripts" / "launcher_wheels.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    house: Path = module.wheelhouse()
    if not any(house.glob("click-*.whl")):  # scripts/setup fills it; else once, with network
        module.download(house)
    return house


@pytest.fixture(scope="module")
def launcher_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("launcher") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                    "-q", "--disable-pip-version-check", "--no-index", "--find-links",
                    str(_wheelhouse()), str(wheel)], check=True, capture_output=True)
    return venv


def in_venv(venv: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A command of the fresh venv, away from the repo: no PYTHONPATH, cwd outside the tree."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean["PATH"] = f"{venv / 'bin'}{os.pathsep}{clean['PATH']}"
    proc = subprocess.run(argv, cwd=venv, env={**clean, **env}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (argv, proc.stdout[-1000:], proc.stderr[-1000:])
    return proc


PROBE = f"""import importlib.metadata as m, importlib.util as u, json, hpc_grpo
print(json.dumps({{"file": hpc_grpo.__file__,
                  "dists": sorted(d.metadata["Name"].lower() for d in m.distributions()),
                  "heavy": [n for n in {(*TRAINING, *TRACKERS)!r} if u.find_spec(n)]}}))
"""


def test_installed_wheel_runs_with_only_the_launcher_dependencies(launcher_venv: Path) -> None:
    found: dict[str, Any] = json.loads(
        in_venv(launcher_venv, str(launcher_venv / "bin" / "python"), "-c", PROBE).stdout)
    assert found["file"].startswith(str(launcher_venv)), found["file"]  # the wheel, not the repo
    assert found["heavy"] == []
    wanted = {Requirement(r).name.lower() for r in
              tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert wanted | {"hpc-grpo"} <= set(found["dists"]) and "torch" not in found["dists"]

    hpc = str(launcher_venv / "bin" / "hpc-grpo")
    assert "Usage: hpc-grpo" in in_venv(launcher_venv, hpc, "--help").stdout
    sites = in_venv(launcher_venv, hpc, "sites", "--json")
    assert {s["name"] for s in json.loads(sites.stdout)} == {
        p.stem for p in (REPO / "site_configs").glob("*.yaml")}
    plan = in_venv(launcher_venv, hpc, "plan", "--site", "sandbox", "--model", "builtin:tiny", "--json")
    assert json.loads(plan.stdout)["world_size"] == 2
    render = in_venv(launcher_venv, hpc, "render", "--site", "sandbox", "--model", "builtin:tiny",
                     "--output-root", str(launcher_venv / "runs"))
    assert render.stdout.startswith("#!") and "#SBATCH --nodes=1" in render.stdout
    assert f"{launcher_venv}/bin/python -u -m submitit.core._submit" in render.stdout
    assert not (launcher_venv / "runs").exists()  # render writes nothing
    completion = in_venv(launcher_venv, hpc, _HPC_GRPO_COMPLETE="bash_source")
    assert "complete -o nosort -F _hpc_grpo_completion hpc-grpo" in completion.stdout


def _extras() -> dict[str, list[str]]:
    extras: dict[str, list[str]] = tomllib.loads(
        (REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return extras


def test_runtime_pins_are_the_tested_set() -> None:
    """pyproject's [runtime]/[vllm] ranges are the matrix doctor checks on the nodes, and the dev
    venv the tests ran in lies inside them (vllm only where installed: the GPU machine)."""
    from hpc_grpo.preflight.doctor import MATRIX

    pins = {Requirement(r).name: Requirement(r).specifier
            for r in _extras()["runtime"] + _extras()["vllm"]}
    for name, (spec, _shown) in MATRIX.items():
        assert name in pins and pins[name] == Requirement(f"x{spec}").specifier, name
    for name, specifier in pins.items():
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            assert name == "vllm", f"{name} is pinned in [runtime] but not installed in the dev venv"
            continue
        assert specifier.contains(version.split("+")[0], prereleases=True), (name, version, specifier)


# The wandb the tests ran with (tests/slow/test_tracking_slow.py writes one run as three offline
# fragments, which `wandb sync` must merge); an older `wandb sync` let one fragment overwrite the
# next (wandb/wandb#3841).
WANDB_TESTED = Version("0.31")


def test_tracker_pins_agree_and_start_at_the_tested_wandb() -> None:
    """[wandb] and [tracking] pin wandb alike, from no older than the tested version, and the
    dev venv's wandb (the one the slow tracking test used) lies inside the pin."""
    pins = {extra: {Requirement(r).name: Requirement(r).specifier for r in _extras()[extra]}
            for extra in ("wandb", "tracking")}
    assert pins["wandb"]["wandb"] == pins["tracking"]["wandb"]
    floor = Version(next(s.version for s in pins["wandb"]["wandb"] if s.operator == ">="))
    assert floor >= WANDB_TESTED, f"wandb>={floor} admits a `wandb sync` that overwrites fragments"
    try:
        version = importlib.metadata.version("wandb")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("wandb is not installed in this venv")
    assert pins["wandb"]["wandb"].contains(version, prereleases=True), (version, floor)
