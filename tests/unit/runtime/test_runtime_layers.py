"""The runtime is a stack (issue: node and rank imported each other): ``shared`` at the bottom,
the root modules and ``models`` on it, ``node`` and ``rank`` side by side above them (neither
imports the other: the node task names the rank's entry module as a string), ``posttrain`` on
top. Every import counts, inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[3] / "hpc_grpo" / "runtime"
# room -> the rooms it may import besides itself
MAY_IMPORT = {
    "shared": set(),
    "root": {"shared"},
    "models": {"shared"},
    "node": {"shared"},
    "rank": {"shared", "root", "models"},
    "posttrain": {"shared", "root", "models", "rank"},
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["hpc_grpo", "runtime"]:
        return None
    return parts[2] if len(parts) >= 3 and parts[2] in MAY_IMPORT else "root"


def _module(path: Path) -> str:
    parts = path.relative_to(RUNTIME.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    where = RUNTIME.parents[1] / Path(*name.split("."))
    return where.is_dir() or where.with_suffix(".py").exists()


def _imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if _is_module(f"{node.module}.{a.name}")]
    return found


MODULES = sorted(RUNTIME.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_each_room_imports_only_the_rooms_below_it(path: Path) -> None:
    module = _module(path)
    room = _room(module)
    assert room is not None
    allowed = MAY_IMPORT[room] | {room}
    crossing = [f"line {line}: {name}" for line, name in _imports(path)
                if (other := _room(name)) is not None and other not in allowed
                and name != "hpc_grpo.runtime"]
    assert crossing == [], f"{module} ({room}) imports {crossing}"


def test_the_rule_sees_a_crossing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from hpc_grpo.runtime.rank import train\n")
    assert (2, "hpc_grpo.runtime.rank") in _imports(bad)
    assert _room("hpc_grpo.runtime.rank.train") == "rank"
    assert _room("hpc_grpo.runtime.probe") == "root"
