"""The ranks' bytecode cache (runtime/node/bytecode.py): only where a package carries no compiled
bytecode, never over the user's own prefix or the switch, and a real interpreter with
PYTHONDONTWRITEBYTECODE=1 then writes into the output root and nothing beside the sources."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.node import bytecode
from hpc_grpo.runtime.node import task as node


def record(run_dir: str) -> RunRecord:
    return RunRecord.from_dict({"schema": 1, "run_id": "r", "run_dir": run_dir, "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1})


def test_packages_without_bytecode_are_named_and_absent_ones_are_not(tmp_path: Path) -> None:
    inits = {"vllm": "/site/vllm/__init__.py", "trl": "/site/trl/__init__.py", "peft": None}
    compiled = {importlib.util.cache_from_source("/site/trl/__init__.py")}
    found = bytecode.without_bytecode(("vllm", "trl", "peft"), inits.get,
                                      lambda path: path in compiled)
    assert found == ["vllm"]


def test_only_where_python_cannot_compile_beside_the_source_itself() -> None:
    inits = {"vllm": "/ro/vllm/__init__.py", "trl": "/rw/trl/__init__.py"}
    writable = lambda folder: folder.startswith("/rw")  # noqa: E731
    assert bytecode.cannot_write(["vllm", "trl"], {}, inits.get, writable) == ["vllm"]
    assert bytecode.cannot_write(["trl"], {}, inits.get, writable) == []
    assert bytecode.cannot_write(["vllm", "trl"], {"PYTHONDONTWRITEBYTECODE": "1"},
                                 inits.get, writable) == ["vllm", "trl"]


def test_a_finder_that_raises_is_no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> None:
        raise RuntimeError("a third-party path hook failed")

    monkeypatch.setattr(importlib.util, "find_spec", broken)
    assert bytecode.without_bytecode(("vllm",)) == []


def test_the_cache_only_where_needed_and_never_over_the_users_choice(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    assert bytecode.bytecode_env(root, {}, []) == {}
    assert bytecode.bytecode_env(root, {"PYTHONDONTWRITEBYTECODE": "1"}, ["vllm"],
                                 lambda: "0123abcd") == {
        "PYTHONPYCACHEPREFIX": str(root / ".bytecode-cache" / "0123abcd"),
        "PYTHONDONTWRITEBYTECODE": ""}
    assert bytecode.bytecode_env(root, {"PYTHONPYCACHEPREFIX": "/mine"}, ["vllm"]) == {}
    assert bytecode.bytecode_env(root, {bytecode.ENV: "0"}, ["vllm"]) == {}


def test_the_ranks_environment_carries_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bytecode, "without_bytecode", lambda *_: ["vllm"])
    env = node.child_env({}, "slurm-7.0", record("/runs/r-0001"))  # a writable vllm: its own
    assert "PYTHONPYCACHEPREFIX" not in env or bytecode.cannot_write(["vllm"], {})
    env = node.child_env({"PYTHONDONTWRITEBYTECODE": "1"}, "slurm-7.0", record("/runs/r-0001"))
    prefix = Path(env["PYTHONPYCACHEPREFIX"])  # the root's, shared by its runs, one per set
    assert prefix.parent == Path("/runs/.bytecode-cache") and prefix.name == bytecode.environment_key()
    assert env["PYTHONDONTWRITEBYTECODE"] == ""
    monkeypatch.setattr(bytecode, "without_bytecode", lambda *_: [])
    env = node.child_env({"PYTHONDONTWRITEBYTECODE": "1"}, "slurm-7.0", record("/runs/r-0001"))
    assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_real_interpreter_compiles_once_into_the_root_and_nothing_beside_the_source(
        tmp_path: Path) -> None:
    package = tmp_path / "site" / "uncompiled"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 41 + 1\n")
    outer = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path / "site")}
    outer.pop("PYTHONPYCACHEPREFIX", None)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        assert bytecode.without_bytecode(("uncompiled",)) == ["uncompiled"]
    finally:
        sys.path.remove(str(tmp_path / "site"))
    env = {**outer, **bytecode.bytecode_env(tmp_path / "runs", outer, ["uncompiled"], lambda: "k")}
    check = [sys.executable, "-c", "import uncompiled, sys; print(uncompiled.VALUE, "
             "sys.dont_write_bytecode, sys.pycache_prefix)"]
    first = subprocess.run(check, env=env, capture_output=True, text=True, check=True)
    prefix = tmp_path / "runs" / ".bytecode-cache" / "k"
    assert first.stdout.split() == ["42", "False", str(prefix)]
    cached = list(prefix.glob(f"{package}/__init__*.pyc".lstrip("/")))
    assert len(cached) == 1 and not (package / "__pycache__").exists()
    written = cached[0].stat().st_mtime_ns
    subprocess.run(check, env=env, capture_output=True, text=True, check=True)
    assert cached[0].stat().st_mtime_ns == written  # read, not compiled and written again
    subprocess.run(check, env=outer, capture_output=True, text=True, check=True)
    assert not (package / "__pycache__").exists()  # without it: compiled at every start


def _install(site: Path, version: str, value: int) -> None:
    """A distribution ``inplace`` at ``version`` whose module says ``value``, every file with the
    same mtime (a reproducible image) and the module the same size in every release."""
    package, info = site / "inplace", site / "inplace-0.dist-info"
    package.mkdir(parents=True, exist_ok=True)
    info.mkdir(exist_ok=True)
    source = package / "__init__.py"
    source.write_text(f"VALUE = {value}\n")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: inplace\nVersion: {version}\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    (info / "RECORD").write_text(f"inplace/__init__.py,sha256={digest},{source.stat().st_size}\n")
    for path in (source, info / "METADATA", info / "RECORD"):
        os.utime(path, ns=(315532800 * 10**9, 315532800 * 10**9))  # 1980-01-01, as in a wheel


def test_a_package_replaced_in_place_with_equal_mtimes_and_sizes_runs_its_new_code(
        tmp_path: Path) -> None:
    """Python trusts cached bytecode whose source mtime and size match: one folder for every
    installed set would run the old release here. The key names the set, so it does not."""
    site = tmp_path / "site"
    outer = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(site)}
    outer.pop("PYTHONPYCACHEPREFIX", None)
    check = [sys.executable, "-c", "import inplace; print(inplace.VALUE)"]
    seen, keys = [], []
    for version, value in (("1.0.1", 41), ("1.0.2", 42)):
        _install(site, version, value)
        keys.append(bytecode.environment_key([str(site)]))
        env = {**outer, **bytecode.bytecode_env(tmp_path / "runs", outer, ["inplace"],
                                                lambda: keys[-1])}
        seen.append(subprocess.run(check, env=env, capture_output=True, text=True,
                                   check=True).stdout.strip())
    assert keys[0] != keys[1] and seen == ["41", "42"]
    # what one shared folder would have done: the first release's bytecode for the second
    shared = {**outer, "PYTHONPYCACHEPREFIX": str(tmp_path / "runs" / ".bytecode-cache" / keys[0]),
              "PYTHONDONTWRITEBYTECODE": ""}
    stale = subprocess.run(check, env=shared, capture_output=True, text=True, check=True)
    assert stale.stdout.strip() == "41"


def test_each_package_is_looked_up_once_and_none_when_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    looked: list[str] = []

    def init_of(name: str) -> str:
        looked.append(name)
        return f"/ro/{name}/__init__.py"

    monkeypatch.setattr(bytecode, "_init_of", init_of)
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    got = bytecode.ranks_env(tmp_path, env)
    assert sorted(looked) == sorted(bytecode.PACKAGES)  # once each, for both questions
    assert got["PYTHONPYCACHEPREFIX"].startswith(str(tmp_path / ".bytecode-cache"))
    looked.clear()
    assert bytecode.ranks_env(tmp_path, {**env, bytecode.ENV: "0"}) == {}
    assert bytecode.ranks_env(tmp_path, {**env, "PYTHONPYCACHEPREFIX": "/mine"}) == {}
    assert looked == []


def test_a_malformed_distribution_still_counts_and_a_failing_key_means_no_cache(
        tmp_path: Path) -> None:
    """A METADATA that is not UTF-8 and a dist-info with nothing in it: the key is computed, and
    the unreadable one's presence changes it. A key that raises leaves the ranks without the
    cache rather than failing the attempt."""
    site = tmp_path / "site"
    (site / "empty-1.0.dist-info").mkdir(parents=True)
    without = bytecode.environment_key([str(site)])
    (site / "latin-1.0.dist-info").mkdir()
    metadata = site / "latin-1.0.dist-info" / "METADATA"
    metadata.write_bytes("Name: latin\nVersion: 1.0\nAuthor: Jos\xe9\n".encode("latin-1"))
    assert bytecode.environment_key([str(site)]) != without

    def broken() -> str:
        raise RuntimeError("a third-party finder failed")

    assert bytecode.bytecode_env(tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}, ["vllm"], broken) == {}
