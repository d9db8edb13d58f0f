"""Site modules and containers (#16) without a cluster: the job script's module block run in
bash (a module that does not load stops the job, named in job-error.json, which status shows),
doctor's node command (each module's outcome handed to the probe; apptainer looked for on the
node), the probe's decisions and doctor's rows, pyxis found through `srun --help`, and, where
this machine has Debian's Lmod, doctor's node command against the real Lmod."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import api
from hpc_grpo.config.site import Container, SiteProfile
from hpc_grpo.preflight import doctor
from hpc_grpo.preflight.doctor import Expect
from hpc_grpo.runs import joberror
from hpc_grpo.runtime import probe
from hpc_grpo.scheduler.jobscript import node_command, pyxis_found
from tests.paths import REPO
from tests.unit.preflight.doctor_helpers import install_fake_srun, report
from tests.unit.preflight.modules_containers_helpers import FAKE_SRUN, doctor_json

# A `module` that fails for any name containing "missing", exported into `bash -c`.
FAKE_MODULE = ('module() { [ "$1" = load ] && case "$2" in *missing*) echo "unknown $2" >&2; '
               'return 1;; esac; }')


def in_bash_with_fake_module(script: str,
                             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    wrapper = f'{FAKE_MODULE}; export -f module; exec bash -c "$1"'
    return subprocess.run(["bash", "-c", wrapper, "_", script], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=30)


def module_block(tmp_path: Path, modules: list[str]) -> tuple[str, Path]:
    """The rendered job script's module block, for a sandbox-derived profile."""
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    lines = "".join(f"  - {json.dumps(m)}\n" for m in modules)
    profile = sites / "mods.yaml"
    profile.write_text((REPO / "site_configs" / "sandbox.yaml").read_text() + f"modules:\n{lines}")
    run_dir = tmp_path / "runs" / "mods-0001"
    run_dir.mkdir(parents=True)
    script = api.prepare(api.Request(site=str(profile), flags={"model": "builtin:tiny"},
                                     run_id="mods-0001", output_root=str(tmp_path / "runs"),
                                     python="/usr/bin/python3")).script
    start = script.index("# Site modules")
    return "set -euo pipefail\n" + script[start:script.index("# Environment")], run_dir


def test_job_script_loads_modules_in_order_and_goes_on(tmp_path: Path) -> None:
    block, run_dir = module_block(tmp_path, ["cuda/12.4", "gcc/13"])
    proc = in_bash_with_fake_module(block + "\necho after-modules")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "after-modules"
    assert not (run_dir / "job-error.json").exists()


def test_job_script_stops_at_a_missing_module_and_names_it(tmp_path: Path) -> None:
    odd = 'missing/1 "x\\y'  # quotes and a backslash survive into the JSON
    block, run_dir = module_block(tmp_path, ["cuda/12.4", odd, "never/loaded"])
    proc = in_bash_with_fake_module(block + "\necho after-modules", {"SLURM_JOB_ID": "4242"})
    assert proc.returncode == 1
    assert "after-modules" not in proc.stdout
    assert f"hpc-grpo: module load {odd} failed on" in proc.stderr
    record = json.loads((run_dir / "job-error.json").read_text())
    assert record["job_id"] == "4242" and record["module"] == odd
    line = joberror.line(run_dir, "4242")
    assert line.startswith(f"module load {odd} failed on ")
    assert joberror.line(run_dir, "4243") == ""  # a later job of the run is not blamed


def test_status_row_shows_the_job_script_failure(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True)
    class Row:
        phase: str = ""
        cause: str = ""
        message: str = ""

    (tmp_path / "job-error.json").write_text(
        json.dumps({"job_id": "9", "module": "cuda/99", "host": "node3"}))
    row = joberror.apply(Row(phase="starting"), tmp_path, "9")
    assert (row.phase, row.cause, row.message) == ("failed", "job script",
                                                   "module load cuda/99 failed on node3")
    assert joberror.apply(Row(phase="starting"), tmp_path, "10").phase == "starting"
    (tmp_path / "job-error.json").write_text("{half")
    assert joberror.line(tmp_path, "9") == ""


# ---- doctor's node command -----------------------------------------------------------------

ENV_PRINTER = """#!{python}
import json, os, sys
print(json.dumps({{k: os.environ.get(k) for k in ("HPC_GRPO_PROBE_MODULES",
    "HPC_GRPO_PROBE_CONTAINER", "APPTAINER_CONTAINER")}} | {{"argv": sys.argv[1:]}}))
"""


def strings(seen: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in seen.items() if isinstance(v, str)}


@pytest.fixture
def printer(tmp_path: Path) -> str:
    path = tmp_path / "python"
    path.write_text(ENV_PRINTER.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def test_node_command_hands_each_module_outcome_to_the_probe(printer: str) -> None:
    site = SiteProfile(name="x", modules=("cuda/12.4", "missing/2", "gcc/13"))
    command = node_command(site, printer, ["--gpus", "0"])
    assert command[:2] == ["bash", "-c"]
    proc = in_bash_with_fake_module(command[2])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["HPC_GRPO_PROBE_MODULES"] == "ok cuda/12.4\nfail missing/2\nok gcc/13\n"
    assert seen["argv"] == ["-m", "hpc_grpo.runtime.probe", "--gpus", "0"]
    fact = probe.modules(seen["HPC_GRPO_PROBE_MODULES"])
    assert fact == {"ok": False, "detail": "module load failed: missing/2 (loaded: cuda/12.4, gcc/13)"}


def test_node_command_without_modules_or_container_is_the_probe() -> None:
    assert node_command(SiteProfile(name="x"), "/py", ["--gpus", "0"]) == \
        ["/py", "-m", "hpc_grpo.runtime.probe", "--gpus", "0"]


FAKE_APPTAINER = """#!/bin/sh
# apptainer exec [--nv] [--bind M]... IMAGE CMD...: runs CMD "inside" IMAGE
shift
while [ "${1#--}" != "$1" ]; do [ "$1" = --nv ] && shift || shift 2; done
image=$1; shift
APPTAINER_CONTAINER=$image exec "$@"
"""


def test_node_command_runs_the_probe_in_apptainer_or_says_it_is_missing(
        tmp_path: Path, printer: str) -> None:
    site = SiteProfile(name="x", gpus_per_node=4, container=Container(
        runtime="apptainer", image="/img/hpc.sif", mounts=("/scratch",)))
    command = node_command(site, printer, [])
    bare = {"PATH": "/usr/bin:/bin"}
    seen = json.loads(subprocess.run(command, capture_output=True, text=True, env=bare).stdout)
    assert seen["HPC_GRPO_PROBE_CONTAINER"].startswith("missing: neither apptainer nor singularity")
    assert seen["argv"][-2:] == ["--container", "apptainer"]
    assert probe.container("apptainer", strings(seen))["ok"] is False  # type: ignore[index]

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "singularity").write_text(FAKE_APPTAINER)
    (bin_dir / "singularity").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    seen = json.loads(subprocess.run(command, capture_output=True, text=True, env=env).stdout)
    assert seen["APPTAINER_CONTAINER"] == "/img/hpc.sif" and not seen["HPC_GRPO_PROBE_CONTAINER"]
    assert probe.container("apptainer", strings(seen)) == {
        "ok": True, "detail": "inside the apptainer image /img/hpc.sif"}


@pytest.mark.parametrize(("expected", "env", "ok"), [
    ("", {}, None),
    ("apptainer", {"SINGULARITY_CONTAINER": "/a.sif"}, True),
    ("apptainer", {}, False),
    ("pyxis", {}, True),  # srun fails the step when pyxis cannot start the image
    ("pyxis", {"HPC_GRPO_PROBE_CONTAINER": "missing: no enroot"}, False),
])
def test_probe_container_decision(expected: str, env: dict[str, str], ok: bool | None) -> None:
    fact = probe.container(expected, env)
    assert (fact if fact is None else fact["ok"]) is ok


def test_probe_modules_decision() -> None:
    assert probe.modules(None) is None
    assert probe.modules("ok a/1\nok b/2\n") == {"ok": True, "detail": "loaded a/1, b/2"}
    assert probe.modules("fail a/1\n")["ok"] is False  # type: ignore[index]


def test_doctor_rows_for_modules_container_and_scontrol_inside() -> None:
    expect = Expect(8, "ib0", modules=("cuda/12.4",), container="pyxis")
    bad = report("gpu2", 1, modules={"ok": False, "detail": "module load failed: cuda/12.4"},
                 container={"ok": True, "detail": "inside the pyxis image"},
                 scontrol={"ok": False, "detail": "scontrol not on PATH of the compute node"})
    good = report("gpu1", 0, modules={"ok": True, "detail": "loaded cuda/12.4"},
                  container={"ok": True, "detail": "inside the pyxis image"})
    rows = doctor.aggregate([good, bad], expect)
    by = {(r.check, r.status): r for r in rows}
    assert by[("modules", "fail")].nodes == ("gpu2",)
    assert by[("modules", "pass")].nodes == ("gpu1",)
    assert "inside the pyxis container" in by[("scontrol", "fail")].detail
    assert "mount Slurm's binaries" in by[("scontrol", "fail")].detail
    silent = doctor.aggregate([report("gpu1", 0)], expect)  # an old probe says nothing
    assert {(r.check, r.status) for r in silent} >= {("modules", "fail"), ("container", "fail")}
    assert doctor.exit_code(rows) == 1


def test_pyxis_found_in_srun_help() -> None:
    assert pyxis_found("  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n")[0] == "pass"
    assert pyxis_found("Usage: srun [OPTIONS(0)...]\n  -N, --nodes=N\n")[0] == "fail"


# ---- the CLI: a fake srun (with or without pyxis) running the real probe -------------------


@pytest.fixture
def srun_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_srun(tmp_path, monkeypatch, FAKE_SRUN)  # skips container options


@pytest.mark.parametrize("pyxis", [True, False])
def test_cli_doctor_pyxis_profile(tmp_path: Path, srun_bin: Path, monkeypatch: pytest.MonkeyPatch,
                                  pyxis: bool) -> None:
    if pyxis:
        monkeypatch.setenv("FAKE_PYXIS", "1")
    data = doctor_json(tmp_path, "container:\n  runtime: pyxis\n  image: nvcr.io#nvidia/pytorch:25.01-py3\n")
    rows = {row["check"]: row for row in data["rows"]}
    assert rows["container runtime"]["status"] == ("pass" if pyxis else "fail")
    assert ("--container-image" in srun_bin.read_text()) is pyxis  # no pyxis: probe without it
    assert rows["scontrol"]["status"] == "pass"
    assert ("inside the pyxis container" in rows["scontrol"]["detail"]) is pyxis


LMOD = Path("/usr/share/lmod/lmod/init/bash")


@pytest.mark.skipif(not LMOD.exists() or shutil.which("bash") is None, reason="no Lmod here")
def test_cli_doctor_with_real_lmod(tmp_path: Path, srun_bin: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's Lmod, a module tree of this test's own (not the sandbox's): one module loads,
    one does not exist; doctor names it and still reports every other check."""
    tree = tmp_path / "modulefiles" / "toolx"
    tree.mkdir(parents=True)
    (tree / "2.1.lua").write_text('setenv("TOOLX_HOME", "/opt/toolx")\n')
    monkeypatch.setenv("MODULEPATH", str(tmp_path / "modulefiles"))
    monkeypatch.delenv("MODULEPATH_ROOT", raising=False)
    monkeypatch.delenv("BASH_ENV", raising=False)
    data = doctor_json(tmp_path, "modules:\n  - toolx/2.1\n  - nosuchmod/9\n")
    rows = {row["check"]: row for row in data["rows"]}
    assert rows["modules"]["status"] == "fail", rows
    assert rows["modules"]["detail"] == "module load failed: nosuchmod/9 (loaded: toolx/2.1)"
    assert rows["job"]["status"] == "pass" and data["exit_code"] == 1
