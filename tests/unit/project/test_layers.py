"""The package's rooms form stacks: a room imports only rooms below it, never one beside or above.

Counted from every module's AST: imports at the top, inside functions and under TYPE_CHECKING
alike, since a circle kept alive by imports inside functions is still a circle (the launcher's
rooms had grown into one: config, planner, scheduler, runs, preflight and export each reached
the others). The order is the README's ("Architecture"): data flows from the command line down
to the run directory, and the run directory's room (shared with the runtime) sits at the bottom.
Rooms on one level may not import each other either. The runtime's rooms are held by
tests/unit/runtime/test_runtime_layers.py (which room may import which: node and rank side by
side, neither importing the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import PACKAGE

# Each stack, lowest level first; a level is one room or several side by side. The package
# root's own modules (``hpc_grpo/__init__.py``, ``errors.py``) are below every room.
LAUNCHER: tuple[tuple[str, ...], ...] = (
    ("rundir",), ("config",), ("planner",), ("scheduler",), ("runs",), ("preflight",),
    ("export",), ("api",), ("cli",))
PLANNER: tuple[tuple[str, ...], ...] = (("planner.memory",), ("planner.speed",), ("planner",))
STACKS = {"launcher": LAUNCHER, "planner": PLANNER}
SUBROOMS = {"planner": ("memory", "speed"), "runtime": ("node", "rank", "posttrain", "models")}


def room_of(module: str) -> str | None:
    """The room a module of the package belongs to (None: the package root's own modules)."""
    parts = module.split(".")
    if parts[0] != "hpc_grpo" or len(parts) < 2 or parts[1] == "errors" or parts[1].startswith("__"):
        return None
    if parts[1].startswith(("cli", "api")):  # cli_preflight.py, api_runs.py: the same room
        return parts[1].split("_")[0]
    if len(parts) > 2 and parts[2] in SUBROOMS.get(parts[1], ()):
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_edges(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(importing room, imported room) -> the imports that make it, as 'module:line -> name'."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = _module_name(path, package.parent)
        here = room_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                there = room_of(name)
                if here and there and there != here:
                    edges.setdefault((here, there), []).append(f"{module}:{node.lineno} -> {name}")
    return edges


def violations(edges: dict[tuple[str, str], list[str]],
               stack: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each import of ``edges`` that goes up ``stack`` or sideways on one of its levels."""
    level = {room: index for index, rooms in enumerate(stack) for room in rooms}
    found = []
    for (here, there), where in sorted(edges.items()):
        if here in level and there in level and level[there] >= level[here]:
            found += [f"{here} imports {there} ({'beside' if level[there] == level[here] else 'above'}"
                      f" it): {w}" for w in where]
    return found


EDGES = room_edges()


@pytest.mark.parametrize("name", sorted(STACKS))
def test_each_room_imports_only_rooms_below_it(name: str) -> None:
    assert violations(EDGES, STACKS[name]) == []


def test_every_room_has_its_place() -> None:
    """A new launcher room joins a stack: none may sit outside every order unchecked."""
    placed = {room for stack in STACKS.values() for rooms in stack for room in rooms}
    rooms = {room for edge in EDGES for room in edge if not room.startswith("runtime")}
    assert rooms - placed == set()


def test_a_planted_upward_import_fails(tmp_path: Path) -> None:
    """The check can fail: an import up the stack inside a function (config -> runs, the edge
    that once closed the launcher's circle) and one under TYPE_CHECKING (memory -> speed)."""
    package = tmp_path / "hpc_grpo"
    for folder in ("config", "runs", "planner/memory", "planner/speed"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "config" / "spec.py").write_text(
        "def check():\n    from hpc_grpo.runs import names\n    return names\n")
    (package / "planner" / "memory" / "estimate.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from hpc_grpo.planner.speed import choose\n")
    planted = room_edges(package)
    found = violations(planted, LAUNCHER) + violations(planted, PLANNER)
    assert any("config imports runs (above it)" in line for line in found), found
    assert any("planner.memory imports planner.speed (above it)" in line for line in found), found
    assert violations(planted, (("config", "runs"),)) != [], "rooms side by side are refused too"
