"""Rendered scripts for profile x spec pairs, compared byte for byte with tests/golden/.

Regenerate with ``pytest tests/unit/scheduler/test_render_golden.py --update-golden`` after a deliberate
change.
"""

from __future__ import annotations

import difflib
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import inputs, machine
from hpc_grpo.scheduler import slurm
from tests.paths import GOLDEN

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


@pytest.fixture(autouse=True)
def hardware_unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped ``local`` profile reads this machine's GPUs (``gpus_per_node: auto``) and a
    Slurm profile is compared with sinfo's Gres: neither is asked here, so the golden scripts
    are the same wherever the tests run (a GPU box, a cluster whose nodes have GPUs)."""
    monkeypatch.setattr(machine, "probe", lambda: machine.Machine(
        (), cpus=2, memory_mib=16384, gpu_source="nvidia-smi not found"))
    monkeypatch.setattr(slurm, "partition_gres", lambda partition: None)


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


def _hostile_site(tmp_path: Path, body: str) -> str:
    """A slurm profile (the sandbox's CPU nodes) with ``body`` appended, as a path for --site."""
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    path = sites / "hostile.yaml"
    path.write_text("scheduler: slurm\npartition: debug\ncpus_per_node: 4\ncpu_memory_gib: 4\n"
                    "procs_per_node: 1\n" + body)
    return str(path)


def test_hostile_values_render_valid_bash_with_every_payload_inside_its_quotes(
        tmp_path: Path) -> None:
    """Line breaks and command substitutions in every free-text profile value the script
    carries: bash -n passes, the header comment and #SBATCH block stay whole (sbatch stops
    reading directives at the first command line), and every copy of the payload is inside the
    shell-quoted word of its value, so no line of it can run."""
    payload = f"\ntouch {tmp_path}/pwned #$(touch {tmp_path}/pwned)"
    values = {"env": f"A{payload}", "module": f"cuda{payload}", "nic": f"ib0{payload}",
              "image": f"/img.sif{payload}", "mount": f"/scratch{payload}",
              "python": f"/opt/python{payload}"}
    site = _hostile_site(tmp_path, "\n".join([
        f"env: {{EVIL: {json.dumps(values['env'])}}}",
        f"modules: [{json.dumps(values['module'])}]",
        f"network_interface: {json.dumps(values['nic'])}",
        "container: {runtime: apptainer, image: " + json.dumps(values["image"])
        + ", mounts: [" + json.dumps(values["mount"]) + "]}",
        f"python: {json.dumps(values['python'])}"]) + "\n")
    script = api.prepare(api.Request(site=site, flags={"model": "builtin:tiny"}, run_id="x-0001",
                                     output_root=str(tmp_path / "runs"))).script
    path = tmp_path / "job.sh"
    path.write_text(script)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = script.splitlines()
    head = lines[:lines.index("")]  # up to the blank line after the directives
    assert all(line.startswith("#") for line in head), head
    assert [line for line in lines if line.startswith("#SBATCH")] == \
        [line for line in head if line.startswith("#SBATCH")]
    rest = script
    for value in values.values():
        assert shlex.quote(value) in rest, value
        rest = rest.replace(shlex.quote(value), "")
    assert "touch" not in rest and "pwned" not in rest


@pytest.mark.parametrize(("body", "flags", "run_id", "field"), [
    ('name: "evil\\ntouch /tmp/pwned #"\n', {}, "x-0001", "name"),
    ('partition: "debug\\n"\n', {}, "x-0001", "partition"),
    ('account: "acct\\n"\n', {}, "x-0001", "account"),
    ('qos: "normal\\ntouch /tmp/pwned"\n', {}, "x-0001", "qos"),
    ("env: {\"A\\n\": x}\n", {}, "x-0001", "env"),
    ('env: {A: "x\\0y"}\n', {}, "x-0001", "env"),
    ("", {"partition": "debug\n"}, "x-0001", "partition"),
    ("", {"name": "job\n"}, "x-0001", "name"),
    ("", {}, "nl\n", "run"),
])
def test_a_line_break_or_nul_where_no_quote_helps_is_refused_in_one_line(
        tmp_path: Path, body: str, flags: dict[str, str], run_id: str, field: str) -> None:
    """Values written unquoted (the header comment, #SBATCH lines, export NAME=) with a line
    break, and a NUL anywhere: refused in one line naming the key. Before, ``$`` matched before
    a trailing newline and 'debug\\n' passed; a name's line break rendered as a command."""
    site = _hostile_site(tmp_path, body)
    with pytest.raises(UserError) as caught:
        api.prepare(api.Request(site=site, flags={"model": "builtin:tiny", **flags},
                                run_id=run_id, output_root=str(tmp_path / "runs")))
    assert field in caught.value.field
    assert "\n" not in caught.value.one_line()


def test_a_percent_in_the_output_root_is_refused(tmp_path: Path) -> None:
    """sbatch and srun read % in --output as a file-name pattern (%j the job id): the logs would
    go to another directory than the one status reads."""
    with pytest.raises(UserError, match="holds a %") as caught:
        api.prepare(api.Request(site=_hostile_site(tmp_path, ""), flags={"model": "builtin:tiny"},
                                run_id="x-0001", output_root=str(tmp_path / "a%jb")))
    assert caught.value.field == "output_root"
