"""No module under tests/ imports a test module (``test_*.py``): a test module that imports
another's helpers couples the two and collects the other's tests into its namespace. Shared
helpers live in helper modules (``tests/paths.py``, ``tests/unit/slurmfake.py``, the
``*_helpers.py`` beside the tests) or in fixtures."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import REPO, TESTS


def _is_test_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def imports_of_test_modules(path: Path) -> list[str]:
    """Each import of a test module in ``path``'s source, as "file:line: the import"."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif node.level:  # relative: from .test_x import y
            names = [f"tests.{node.module or ''}"] + [f"tests.{alias.name}" for alias in node.names]
        for name in names:
            if _is_test_module(name) and (name.count(".") == 0 or _exists(name)):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
                break
    return found


def _exists(dotted: str) -> bool:
    """``from tests.unit import test_x`` names a module; ``from tests.unit.x import test_y``
    names a function only when no file of that name exists (one that does is still a test
    module's import)."""
    return (REPO / Path(*dotted.split("."))).with_suffix(".py").exists()


def test_no_module_under_tests_imports_a_test_module() -> None:
    found = [line for path in sorted(TESTS.rglob("*.py")) for line in imports_of_test_modules(path)]
    assert not found, "\n".join(found)


def test_a_planted_import_of_a_test_module_is_found(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    for source in ("from tests.unit.planner.test_planner import something\n",
                   "from tests.unit.planner import test_planner as planner\n",
                   "import tests.unit.planner.test_planner\n",
                   "def f() -> None:\n    from tests.gpu.test_gpu import machine\n"):
        planted.write_text(source)
        try:
            assert len(imports_of_test_modules(planted)) == 1, source
        finally:
            planted.unlink()
    planted.write_text("from tests.unit.planner.planner_helpers import request\n"
                       "from tests.paths import REPO\n")
    try:
        assert imports_of_test_modules(planted) == []
    finally:
        planted.unlink()
