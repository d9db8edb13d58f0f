"""The one import-boundary test: runtime and launcher meet only at the run directory.

The run directory's room (``hpc_grpo.rundir``: the contract, its file names and its reads and
writes) is stdlib only and imports nothing else of the package. The runtime (``hpc_grpo.runtime``)
runs on compute nodes with the training stack and imports of the package only itself, the run
directory's room and the package root; the launcher imports of the runtime only the node task
that submitit pickles, the probe doctor reads (with the lines its report travels in) and the
host memory rule (stdlib only), which a local profile's figure is read by as the ranks check it. The
static rule is read from every module's AST; the import-time rules run in fresh interpreters.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "hpc_grpo"
LAUNCHER_MAY_IMPORT = {"hpc_grpo.runtime.node.task", "hpc_grpo.runtime.shared.host_memory",
                       "hpc_grpo.runtime.probe", "hpc_grpo.runtime.probe_lines"}
LAUNCHER_ONLY_LIBS = {"click", "jinja2", "submitit", "yaml", "rich"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").exists() or (REPO / rel / "__init__.py").exists()


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_runtime_and_launcher_meet_only_at_the_contract(path: Path) -> None:
    module = _module_name(path)
    in_runtime = module.startswith("hpc_grpo.runtime")
    in_rundir = module.startswith("hpc_grpo.rundir")
    for name in _imports(path):
        top = name.split(".")[0]
        if in_rundir:  # both sides read it: nothing of either side, nothing beyond the stdlib
            assert top in sys.stdlib_module_names or name.startswith("hpc_grpo.rundir") \
                or name == "__future__", f"{module} (run directory) imports {name}"
        elif in_runtime:
            assert top not in LAUNCHER_ONLY_LIBS, f"{module} imports {name}"
            if name.startswith("hpc_grpo") and _is_module(name):
                assert name == "hpc_grpo" or name.startswith(("hpc_grpo.runtime", "hpc_grpo.rundir")), \
                    f"{module} (runtime) imports launcher module {name}"
        elif name.startswith("hpc_grpo.runtime") and _is_module(name) and name != "hpc_grpo.runtime":
            assert name in LAUNCHER_MAY_IMPORT, f"{module} (launcher) imports runtime module {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_import_is_absolute(path: Path) -> None:
    """The static check above reads absolute module names only: a relative import would pass
    it unseen, so there is none."""
    relative = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert relative == [], f"{path.relative_to(PACKAGE)}: relative import at lines {relative}"


def _loaded_after(imports: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter has loaded after ``import {imports}``."""
    code = (f"import json, sys, {imports}; "
            f"print(json.dumps(sorted(m for m in {candidates!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_node_task_import_is_light() -> None:
    heavy = ("torch", "trl", "transformers", "click", "jinja2", "submitit", "yaml", "rich")
    assert _loaded_after("hpc_grpo.runtime.node.task", heavy) == []


def test_probe_imports_no_launcher_module() -> None:
    bad = ("click", "jinja2", "submitit", "yaml", "rich", "torch", "hpc_grpo.api", "hpc_grpo.cli",
           "hpc_grpo.scheduler.slurm")
    assert _loaded_after("hpc_grpo.runtime.probe", bad) == []


def test_launcher_modules_do_not_import_the_training_stack() -> None:
    stack = ("torch", "trl", "vllm", "transformers", "deepspeed")
    launcher = "hpc_grpo.cli, hpc_grpo.api, hpc_grpo.runs.track, hpc_grpo.runtime.node.task"
    assert _loaded_after(launcher, stack) == []


def test_the_rule_catches_a_crossing(tmp_path: Path) -> None:
    """The AST reader sees a launcher import inside a runtime module (the test can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from hpc_grpo.planner.job import JobPlan\nimport click\n")
    names = _imports(bad)
    assert "hpc_grpo.planner.job" in names and "click" in names
    assert _is_module("hpc_grpo.planner.job") and not _is_module("hpc_grpo.planner.job.JobPlan")


# What the CLI may take from beside api: the error type, a default for --help, and the views
# that draw what api returned.
CLI_MAY_IMPORT = {
    "hpc_grpo": {"api", "api_runs"},  # api_runs: the run side alone (status, logs, cancel)
    "hpc_grpo.api": {"Request"}, "hpc_grpo.errors": {"UserError"},
    "hpc_grpo.rundir.contract": {"DEFAULT_SEED"},
    "hpc_grpo.runs.views": {"follow", "print_logs", "status_table", "watch_status"},
    "hpc_grpo.runs.terminal": {"console"},  # every view's console: no wrapping off a terminal
    "hpc_grpo.preflight": {"doctor"},
    "hpc_grpo.cli_posttrain": {"posttrain_commands"},  # export and eval, beside cli.py
    "hpc_grpo.cli_preflight": {"preflight_commands"},  # doctor and site init, beside cli.py
    "hpc_grpo.cli_speed": {"plan_tail"},  # the plan view's step-time tables, beside cli.py
}
CLI_MODULES = ("cli.py", "cli_posttrain.py", "cli_preflight.py")


def test_every_cli_command_goes_through_api() -> None:
    """#12: 7 of the CLI's 10 commands went around api. The CLI parses and prints; everything
    it asks goes to api (views draw what api returned; doctor's table is drawn by doctor)."""
    trees = [ast.parse((PACKAGE / name).read_text()) for name in CLI_MODULES]
    taken = {}
    for node in [node for tree in trees for node in ast.walk(tree)]:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpc_grpo"):
            taken.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("hpc_grpo") for a in node.names), ast.dump(node)
    extra = {m: names - CLI_MAY_IMPORT.get(str(m), set()) for m, names in taken.items()}
    assert {m: n for m, n in extra.items() if n} == {}
    calls = {n.attr for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id == "checks"}
    assert calls == {"print_table"}, calls  # doctor's module only draws; api.doctor runs it
