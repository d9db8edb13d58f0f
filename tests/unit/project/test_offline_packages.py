"""tests/cluster/offline-packages.sh install: what carries the sandbox's Debian packages to the
GPU machine must never overwrite a file the target has, and must follow a merged /usr."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import TESTS

SCRIPT = TESTS / "cluster" / "offline-packages.sh"
pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def _deb(tmp: Path, name: str, files: dict[str, str]) -> Path:
    tree = tmp / f"tree-{name}"
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    (tree / "DEBIAN").mkdir()
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@t>\nDescription: t\n")
    out = tmp / "debs" / f"{name}.deb"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(out)], check=True,
                   capture_output=True)
    return out


def test_install_keeps_present_files_and_folds_lib_into_usr(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")  # merged /usr, as on Ubuntu 24.04
    (root / "usr/lib/x86_64-linux-gnu/libkept.so.1").write_text("the target's own, newer build")
    _deb(tmp_path, "libs", {"lib/x86_64-linux-gnu/libkept.so.1": "carried, older",
                            "lib/x86_64-linux-gnu/libnew.so.2": "carried"})
    _deb(tmp_path, "tool", {"usr/sbin/slurmd-wlm": "binary"})
    proc = subprocess.run(["bash", str(SCRIPT), "install", str(tmp_path / "debs")],
                          env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                               "HPC_GRPO_INSTALL_ROOT": str(root)},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (root / "lib").is_symlink()
    lib = root / "usr/lib/x86_64-linux-gnu"
    assert (lib / "libkept.so.1").read_text() == "the target's own, newer build"
    assert (lib / "libnew.so.2").read_text() == "carried"
    assert (root / "usr/sbin/slurmd").read_text() == "binary"  # Debian's alternative, linked
    assert (root / "usr/sbin/slurmd").is_symlink()
    assert "installed 2 files" in proc.stderr


def test_install_without_packages_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "install"], capture_output=True, text=True)
    assert proc.returncode != 0 and "usage" in proc.stderr
