"""README's Architecture table names every folder of the package, so the folder list it explains
is the one on disk (issue #12: someone new reads the architecture from it)."""

from __future__ import annotations

import re

from tests.paths import REPO


def _table() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def test_every_package_folder_has_a_row() -> None:
    table = _table()
    package = REPO / "hpc_grpo"
    folders = sorted(p.parent.relative_to(REPO).as_posix() for p in package.rglob("__init__.py")
                     if p.parent != package)
    assert len(folders) >= 7
    named = set(re.findall(r"`(hpc_grpo/[\w/.]+?)/?`", table))  # folders and modules
    missing = [f for f in folders if not any(n == f or n.startswith(f"{f}/") for n in named)]
    assert missing == [], f"README Architecture table lacks a row for {missing}"


def test_every_named_module_exists() -> None:
    """A `name.py` the table mentions in a folder's row is a file of that folder."""
    for row in _table().splitlines()[2:]:
        first = row.split("|")[1]
        folder = re.search(r"`(hpc_grpo/[\w/]+?)/?`", first)
        if folder is None or not (REPO / folder.group(1)).is_dir():
            continue
        for module in re.findall(r"`(\w+\.py)`", row.split("|", 2)[2]):
            assert list((REPO / folder.group(1)).rglob(module)), f"{folder.group(1)}: no {module}"
