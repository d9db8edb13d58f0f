"""The size limits of issue #12, held: small modules, short functions where the launcher decides.

No module of the package over 400 lines (planner modules under 250, the house style), and no
function over 60 lines in the planning and rendering path, so each step stays one screen that a
newcomer can read and a test can name. A module or function that grows past them fails here
with its name and length; split it into named steps rather than raising the limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import PACKAGE

MODULE_LINES = 400
PLANNER_MODULE_LINES = 250
FUNCTION_LINES = 60
# The launcher's planning and rendering path: what turns a request into a plan and a script.
PLANNING_PATH = ("planner", "config", "scheduler/render.py", "scheduler/envvars.py")
API_PLANNING = ("load_spec", "site_ref", "prepare", "_prepare", "plan")


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from `def` to the last line of the body, decorators left out."""
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def _long_functions(path: Path, names: tuple[str, ...] = (), root: Path = PACKAGE.parent) -> list[str]:
    """Functions of `path` over the limit (only those in `names`, if given), as readable lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(root)}:{f.lineno} {f.name} has {_length(f)} lines"
            for f in _functions(tree)
            if _length(f) > FUNCTION_LINES and (not names or f.name in names)]


def _planning_files() -> list[Path]:
    files: list[Path] = []
    for part in PLANNING_PATH:
        target = PACKAGE / part
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return files


def test_no_module_over_its_limit() -> None:
    too_long = []
    for path in _modules():
        limit = PLANNER_MODULE_LINES if path.parent.name == "planner" else MODULE_LINES
        lines = len(path.read_text().splitlines())
        if lines > limit:
            too_long.append(f"{path.relative_to(PACKAGE.parent)} has {lines} lines (limit {limit})")
    assert too_long == [], "split these by role:\n" + "\n".join(too_long)


def test_no_long_function_in_the_planning_and_rendering_path() -> None:
    files = _planning_files()
    assert all(f.is_file() for f in files) and len(files) > 15  # the path still exists as named
    too_long = [line for path in files for line in _long_functions(path)]
    too_long += _long_functions(PACKAGE / "api.py", API_PLANNING)
    assert too_long == [], "split these into named steps:\n" + "\n".join(too_long)


def test_api_planning_functions_exist() -> None:
    """The names checked in api.py are real, so a rename cannot silently drop them."""
    tree = ast.parse((PACKAGE / "api.py").read_text())
    assert set(API_PLANNING) <= {f.name for f in _functions(tree)}


@pytest.mark.parametrize("total", [FUNCTION_LINES, FUNCTION_LINES + 1])
def test_the_measure_can_fail(tmp_path: Path, total: int) -> None:
    """A function one line over the limit is reported, nested ones too; one at the limit is not."""
    source = tmp_path / "long.py"
    body = "    x = 1\n" * (total - 1)
    source.write_text(f"def f() -> None:\n{body}\n\nclass C:\n    def g(self) -> None:\n"
                      + body.replace("    ", "        "))
    found = _long_functions(source, root=tmp_path)
    expected = [] if total <= FUNCTION_LINES else [f"long.py:1 f has {total} lines",
                                                   f"long.py:{total + 4} g has {total} lines"]
    assert sorted(found) == sorted(expected)
