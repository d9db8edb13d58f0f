"""``hpc-grpo``: a thin Click layer over ``hpc_grpo.api``.

Every user-fixable problem arrives as a UserError and leaves as one line on stderr with exit
code 2. Heavy modules (rich, submitit, the API itself) load inside commands to keep
``hpc-grpo --help`` fast on a login node.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from hpc_grpo.errors import UserError

JOB_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("--site", default="local", show_default=True, help="Profile name or YAML path."),
    click.option("--model", help="Model folder, hub id, catalogue name, or builtin:tiny."),
    click.option("--recipe", type=click.Path(dir_okay=False), help="YAML of job and GRPOConfig keys."),
    click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                 help="Override a recipe key (repeatable)."),
    click.option("--nodes", type=int),
    click.option("--procs-per-node", type=int, help="Default: one per GPU (1 on CPU sites)."),
    click.option("--tp", "tensor_parallel_size", type=int, help="vLLM tensor-parallel size."),
    click.option("--vllm-mode", type=click.Choice(["colocate", "server"])),
    click.option("--zero-stage", type=click.IntRange(0, 3)),
    click.option("--dataset"),
    click.option("--reward", "reward_funcs", multiple=True, help="builtin:NAME or module:function."),
    click.option("--seed", type=int),
    click.option("--time", help="Slurm time limit, e.g. 04:00:00."),
    click.option("--name", help="Job name (default from the model)."),
    click.option("--partition"),
    click.option("--payload", type=click.Choice(["train", "check"]),
                 help="check: a torch.distributed smoke test instead of training."),
    click.option("--run-id", help="Default: NAME-NNNN, the next free number."),
    click.option("--output-root", help="Where run directories go (default: the site's)."),
]
FLAG_NAMES = ("model", "nodes", "procs_per_node", "tensor_parallel_size", "vllm_mode",
              "zero_stage", "dataset", "reward_funcs", "seed", "time", "name", "partition",
              "payload")


def job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(JOB_OPTIONS):
        func = option(func)
    return func


def make_request(kwargs: dict[str, Any]) -> Any:
    from hpc_grpo.api import Request

    flags = {k: kwargs[k] for k in FLAG_NAMES if kwargs.get(k) not in (None, ())}
    return Request(site=kwargs["site"], recipe=kwargs["recipe"], sets=tuple(kwargs["sets"]),
                   flags=flags, run_id=kwargs["run_id"], output_root=kwargs["output_root"])


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """One clear line and exit code 2 for anything the user can fix."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(exc.one_line(), err=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpc-grpo")
def main() -> None:
    """GRPO training with TRL, from this machine to a Slurm cluster."""


@main.command()
@user_errors
def sites() -> None:
    """List the site profiles (yours first, then the built-in ones)."""
    from hpc_grpo.api import user_site_dirs
    from hpc_grpo.config.site import available_sites, load_site, site_dirs

    dirs = site_dirs(user_site_dirs())
    for name, path in sorted(available_sites(dirs).items()):
        profile = load_site(str(path), dirs)
        gpus = f"{profile.gpus_per_node} x {profile.gpu_type or 'GPU'}" if profile.gpus_per_node \
            else "CPU only"
        click.echo(f"{name:<16} {profile.scheduler:<6} {gpus:<14} {profile.description}")


@main.command()
@job_options
@user_errors
def render(**kwargs: Any) -> None:
    """Print the exact script submit would send, then the rendezvous and rank table."""
    from hpc_grpo import api

    prepared = api.prepare(make_request(kwargs))
    click.echo(prepared.script, nl=False)
    click.echo(f"# ---- run {prepared.run_id} -> {prepared.run_dir}", err=True)
    click.echo(prepared.summary, nl=False, err=True)


@main.command()
@job_options
@click.option("--dry-run", is_flag=True, help="Same as render: print, submit nothing.")
@click.option("--wait/--no-wait", default=None,
              help="Follow progress until the job ends (default: on for the local site).")
@user_errors
def submit(dry_run: bool, wait: bool | None, **kwargs: Any) -> None:
    """Create a run directory and submit the job."""
    from hpc_grpo import api

    request = make_request(kwargs)
    if dry_run:
        prepared = api.prepare(request)
        click.echo(prepared.script, nl=False)
        click.echo(prepared.summary, nl=False, err=True)
        return
    result = api.submit(request)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"run {result.run_id}  job {result.job_id}  dir {result.run_dir}")
    if wait if wait is not None else request.site == "local":
        from hpc_grpo.watch import follow

        sys.exit(follow(result.run_id))


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", is_flag=True, help="Refresh every few seconds until interrupted.")
@user_errors
def status(runs: tuple[str, ...], as_json: bool, watch: bool) -> None:
    """Slurm state joined with training progress, requeues and checkpoint age."""
    from hpc_grpo import track
    from hpc_grpo.watch import status_table, watch_status

    if watch:
        watch_status(runs)
        return
    rows = track.status(runs)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        status_table(rows)


@main.command()
@click.argument("run")
@click.option("--rank", type=int, help="Only this global rank's log.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows.")
@user_errors
def logs(run: str, rank: int | None, follow: bool) -> None:
    """Print a run's per-rank logs (and the node tasks' Slurm logs)."""
    from hpc_grpo import track
    from hpc_grpo.watch import print_logs

    print_logs(track.log_paths(run, rank), follow=follow)


@main.command()
@click.argument("run")
@user_errors
def cancel(run: str) -> None:
    """Cancel a run's job (all nodes)."""
    from hpc_grpo import track

    job_id = track.cancel(run)
    click.echo(f"cancelled job {job_id}")


@main.command("example-model")
@click.argument("directory", type=click.Path(file_okay=False))
@user_errors
def example_model(directory: str) -> None:
    """Write the tiny offline Qwen2-shaped model and tokenizer used by the examples."""
    try:
        from hpc_grpo.runtime.tiny_model import build_tiny_model
    except ImportError as exc:
        raise UserError(f"the runtime stack is not installed ({exc.name})",
                        hint="pip install 'hpc-grpo[runtime]'") from None
    from pathlib import Path

    path = build_tiny_model(Path(directory))
    click.echo(f"wrote {path}")


if __name__ == "__main__":
    main()
