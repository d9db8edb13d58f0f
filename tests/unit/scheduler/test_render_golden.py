"""Rendered scripts for profile x spec pairs, compared byte for byte with tests/golden/.

Regenerate with ``pytest tests/unit/scheduler/test_render_golden.py --update-golden`` after a deliberate
change.
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.preflight import inputs

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
CASES = {
    "sandbox-2n-tiny": dict(site="sandbox", flags={"model": "builtin:tiny", "nodes": 2}),
    "sandbox-3n-tp2-check": dict(site="sandbox", flags={
        "model": "builtin:tiny", "nodes": 3, "procs_per_node": 2, "tensor_parallel_size": 2,
        "payload": "check", "time": "00:20:00"}),
    "h100-4n-qwen72b": dict(site="h100-pyxis", flags={
        "model": "Qwen2.5-Math-72B", "nodes": 4, "time": "12:00:00"}),
    "lmod-2n-qwen7b": dict(site="lmod-apptainer", flags={
        "model": "Qwen/Qwen2.5-7B", "nodes": 2, "time": "06:00:00"}),
    "local-tiny": dict(site="local", flags={"model": "builtin:tiny"}),
}



@pytest.fixture(autouse=True)
def cluster_sized_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """These plans are for clusters, not this machine: the output file system's free space is
    a cluster's scratch (1 PiB), so no warning depends on this machine's disk."""
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))

def _prepare(case: dict) -> api.Prepared:
    return api.prepare(api.Request(
        site=case["site"], flags=case["flags"], run_id="golden-0001",
        output_root="/shared/hpc-grpo-runs", python="/opt/venv/bin/python",
        sets=("num_generations=8", "per_device_train_batch_size=8"),
    ))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_script(name: str, update_golden: bool) -> None:
    prepared = _prepare(CASES[name])
    text = prepared.script + "#### summary\n" + prepared.summary
    path = GOLDEN / f"{name}.sbatch"
    if update_golden or not path.exists():
        if not update_golden:
            pytest.fail(f"{path} is missing: run pytest --update-golden")
        path.write_text(text)
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        pytest.fail(f"rendered script differs from {path.name}:\n{diff}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_is_valid_bash(name: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(_prepare(CASES[name]).script)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_render_is_deterministic() -> None:
    first = _prepare(CASES["sandbox-2n-tiny"]).script
    assert first == _prepare(CASES["sandbox-2n-tiny"]).script


def test_shell_metacharacters_are_quoted_never_run(tmp_path: Path) -> None:
    """A hostile env value renders quoted: running the env part prints it, never executes it."""
    marker = tmp_path / "pwned"
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    (sites / "evil.yaml").write_text(
        "scheduler: slurm\npartition: debug\n"
        f"env:\n  EVIL: \"$(touch {marker}); `touch {marker}` ; echo hi > {marker}\"\n"
    )
    prepared = api.prepare(api.Request(
        site=str(sites / "evil.yaml"), flags={"model": "builtin:tiny"}, run_id="x-0001",
        output_root=str(tmp_path / "runs"), python="/usr/bin/python3"))
    exports = [ln for ln in prepared.script.splitlines() if ln.startswith("export EVIL=")]
    assert len(exports) == 1
    proc = subprocess.run(["bash", "-c", exports[0] + '; printf %s "$EVIL"'],
                          capture_output=True, text=True)
    assert proc.stdout.startswith("$(touch")
    assert not marker.exists()
