"""Regenerate docs/cli.md from the Click command tree in hpc_grpo/cli.py.

The reference is written from the commands themselves (docstrings, arguments, options, types,
defaults), so it cannot describe a flag that does not exist; tests/unit/cli/test_cli_docs.py fails
while docs/cli.md differs from what this script writes. Run: python scripts/gen_cli_docs.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "cli.md"

HEADER = """# CLI reference

Generated from the Click commands by `scripts/gen_cli_docs.py`; do not edit by hand
(`tests/unit/cli/test_cli_docs.py` fails while this file is stale). How the commands fit together:
[quickstart-cluster.md](quickstart-cluster.md). Exit codes and shell completion: the end of this page.
"""

EXIT_CODES = (
    ("0", "success", "every command"),
    ("1", "the job or a check failed",
     "`doctor` (a check failed on a node, or its job never ran); `submit` when it waits (`--wait`, "
     "the default on the local site) and `resume` likewise, when the job ends in any state but "
     "COMPLETED; `export` when its check or the export itself failed (nothing is written)"),
    ("2", "bad input: one line per problem naming it, with a hint; nothing is submitted",
     "every command: unknown site or run, a recipe value TRL refuses, more nodes than the "
     "partition has, a Click usage error"),
)
EXIT_TABLE = "\n".join(f"| {code} | {meaning} | {where} |" for code, meaning, where in EXIT_CODES)

FOOTER = f"""## Exit codes

| code | meaning | commands |
|---|---|---|
{EXIT_TABLE}

## Shell completion

Click's own completion: command names, options, choices and the `--site` profile names.

```bash
# bash (~/.bashrc)
eval "$(_HPC_GRPO_COMPLETE=bash_source hpc-grpo)"
# zsh (~/.zshrc)
eval "$(_HPC_GRPO_COMPLETE=zsh_source hpc-grpo)"
# fish (~/.config/fish/completions/hpc-grpo.fish)
_HPC_GRPO_COMPLETE=fish_source hpc-grpo | source
```
"""


def _type_text(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    kind = param.type
    if isinstance(kind, click.Choice):
        return " \\| ".join(f"`{c}`" for c in kind.choices)
    if isinstance(kind, click.IntRange):
        low = "" if kind.min is None else str(kind.min)
        high = "" if kind.max is None else str(kind.max)
        return f"integer {low}..{high}"
    return {"integer": "integer", "text": "text", "path": "path", "file": "path"}.get(
        kind.name, kind.name)


def _option_row(param: click.Option) -> str:
    names = ", ".join(f"`{n}`" for n in (*param.opts, *param.secondary_opts))
    help_text = " ".join((param.help or "").split())
    notes = [help_text] if help_text else []
    if param.required:
        notes.append("Required.")
    if param.multiple and "repeatable" not in help_text:
        notes.append("Repeatable.")
    if param.show_default and param.default not in (None, "", False, ()):
        notes.append(f"Default: `{param.default}`.")
    kind = f"`{param.metavar}`" if param.metavar else _type_text(param)
    return f"| {names} | {kind} | {' '.join(notes)} |"


def _command(path: list[str], command: click.Command, out: list[str]) -> None:
    name = " ".join(path)
    out.append(f"## `{name}`\n")
    with click.Context(command, info_name=name) as ctx:
        usage = " ".join(command.collect_usage_pieces(ctx))
    out.append(f"```\n{name} {usage}\n```\n")
    doc = " ".join((command.help or "").split())
    if doc:
        out.append(f"{doc}\n")
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if arguments:
        out.append("Arguments: " + ", ".join(
            f"`{a.human_readable_name}`" + (" (any number)" if a.nargs == -1 else "")
            for a in arguments) + "\n")
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        out.append("| option | type | meaning |\n|---|---|---|")
        out.extend(_option_row(p) for p in options)
        out.append("| `-h`, `--help` | flag | Show the help and exit. |\n")
    if isinstance(command, click.Group):
        for sub_name in sorted(command.commands):
            _command([*path, sub_name], command.commands[sub_name], out)


def render() -> str:
    """The whole of docs/cli.md for the commands as they are now."""
    from hpc_grpo.cli import main

    out = [HEADER]
    doc = " ".join((main.help or "").split())
    out.append(f"`hpc-grpo`: {doc} Global options: `--version`, `-h`/`--help`.\n")
    out.append("Commands: " + ", ".join(
        f"[`{n}`](#hpc-grpo-{n.replace(' ', '-')})" for n in sorted(main.commands)) + ".\n")
    for sub_name in sorted(main.commands):
        _command(["hpc-grpo", sub_name], main.commands[sub_name], out)
    out.append(FOOTER)
    return "\n".join(out)


def main() -> int:
    TARGET.write_text(render())
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
