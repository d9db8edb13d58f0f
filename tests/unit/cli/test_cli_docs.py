"""The CLI's outside surface (#16): the generated reference is current, shell completion is
produced, every command that reads state speaks JSON, and the documented exit codes hold in a
real process (0 ok, 1 the job or a check failed, 2 bad input)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from tests.paths import REPO


def _gen_script() -> ModuleType:
    path = REPO / "scripts" / "gen_cli_docs.py"
    spec = importlib.util.spec_from_file_location("gen_cli_docs", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current() -> None:
    shipped = (REPO / "docs" / "cli.md").read_text()
    assert shipped == _gen_script().render(), "docs/cli.md is stale: run python scripts/gen_cli_docs.py"


def test_cli_reference_names_every_command_and_option() -> None:
    text = _gen_script().render()
    for name, command in main.commands.items():
        assert f"## `hpc-grpo {name}`" in text
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in text, (name, opt)
    assert "## `hpc-grpo site init`" in text and "`--force`" in text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_is_produced(shell: str) -> None:
    result = CliRunner().invoke(main, [], prog_name="hpc-grpo",
                                env={"_HPC_GRPO_COMPLETE": f"{shell}_source"})
    assert result.exit_code == 0, result.output
    assert "_HPC_GRPO_COMPLETE" in result.output and "hpc-grpo" in result.output


def test_completion_offers_commands_and_site_names() -> None:
    def complete(words: str, cword: int) -> list[str]:
        result = CliRunner().invoke(main, [], prog_name="hpc-grpo", env={
            "_HPC_GRPO_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
        assert result.exit_code == 0, result.output
        return result.output.split()

    assert "plain,status" in complete("hpc-grpo st", 1)
    assert complete("hpc-grpo plan --site sa", 3) == ["plain,sandbox", "plain,sandbox-gpu"]
    assert "plain,local" in complete("hpc-grpo doctor --site ", 3)


def test_sites_json_has_every_profile_key() -> None:
    result = CliRunner().invoke(main, ["sites", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    data = {site["name"]: site for site in json.loads(result.output)}
    assert data["sandbox"]["partition"] == "debug" and data["sandbox"]["port_range"] == [21000, 21999]
    assert data["h100-pyxis"]["container"]["runtime"] == "pyxis"


def test_logs_json_lists_the_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r-0001"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "rank-1.log").write_text("one\n")
    (run_dir / "logs" / "rank-0.log").write_text("zero!\n")
    (run_dir / "run.json").write_text("{}")
    result = CliRunner().invoke(main, ["logs", str(run_dir), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {"path": str(run_dir / "logs" / "rank-0.log"), "bytes": 6},
        {"path": str(run_dir / "logs" / "rank-1.log"), "bytes": 4}]
    result = CliRunner().invoke(main, ["logs", str(run_dir), "--json", "--follow"])
    assert result.exit_code == 2 and "cannot --follow" in result.output


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in its own process: the exit status a shell script sees."""
    return subprocess.run([sys.executable, "-c", "from hpc_grpo.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def test_exit_codes_in_a_real_process(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text((REPO / "site_configs" / "local.yaml").read_text()
                      + "python: /nonexistent/python3\n")
    root = str(tmp_path / "runs")
    cases: list[tuple[int, tuple[str, ...]]] = [
        (0, ("sites",)),
        (0, ("plan", "--site", "sandbox", "--model", "builtin:tiny", "--json")),
        (0, ("status", "--json")),
        (2, ("plan", "--site", "sandbox", "--model", "builtin:tiny", "--set", "max_steps=abc")),
        (2, ("render", "--site", "no-such-site", "--model", "builtin:tiny")),
        (2, ("logs", "no-such-run")),
        (2, ("cancel", "no-such-run")),
        (2, ("status", "--no-such-flag")),
        (2, ("doctor", "--site", "local")),
        # a site python that cannot run: one line, not a traceback (exit 1)
        (2, ("submit", "--site", str(broken), "--model", "builtin:tiny", "--output-root", root)),
    ]
    for code, args in cases:
        proc = cli(*args)
        assert proc.returncode == code, (args, proc.stdout[-500:], proc.stderr[-500:])
        if code == 2 and not args[-1].startswith("--no-such"):
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
    assert not Path(root).exists()


def test_exit_code_1_when_a_check_fails(tmp_path: Path) -> None:
    """doctor's job never ran (srun's step died): exit 1, the check's failure on stdout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'slurmstepd: error: execve(): python: No such "
                                  "file or directory' >&2\nexit 2\n")
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho node1\n")
    for name in ("srun", "sinfo"):
        (bin_dir / name).chmod(0o755)
    site = tmp_path / "one.yaml"
    site.write_text((REPO / "site_configs" / "sandbox.yaml").read_text())
    proc = cli("doctor", "--site", str(site), "--nodes", "1", "--output-root", str(tmp_path / "o"),
               env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "execve()" in proc.stdout


def test_docs_are_linked_and_links_resolve() -> None:
    """The README reaches every user page (#16), and no relative link in README or docs/ is dead."""
    readme = (REPO / "README.md").read_text()
    for page in ("quickstart-cluster.md", "troubleshooting.md", "recipe.md", "cli.md"):
        assert f"](docs/{page})" in readme, page
    dead = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", doc.read_text()):
            if not target.startswith("http") and not (doc.parent / target).exists():
                dead.append(f"{doc.name} -> {target}")
    assert not dead, dead
