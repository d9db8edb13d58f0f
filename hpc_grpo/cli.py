"""``hpc-grpo``: a thin Click layer over ``hpc_grpo.api``.

Every user-fixable problem arrives as a UserError and leaves as one line on stderr (one line
each when several are found in one pass) with exit code 2. Heavy modules (rich, submitit, the
API itself) load inside commands to keep ``hpc-grpo --help`` fast on a login node; status, logs
and cancel load only the API's run side (``api_runs``: no Jinja, YAML or planner).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from hpc_grpo.cli_posttrain import posttrain_commands
from hpc_grpo.cli_preflight import preflight_commands
from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import DEFAULT_SEED


def complete_sites(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion for --site: the profile names `sites` lists (none if they cannot load)."""
    try:
        from hpc_grpo import api

        return [name for name in api.sites().loaded if name.startswith(incomplete)]
    except UserError:
        return []


JOB_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("--site", default="local", show_default=True, help="Profile name or YAML path.",
                 shell_complete=complete_sites),
    click.option("--model", help="Model folder, hub id, catalogue name, or builtin:tiny."),
    # Paths are plain text here: the readers refuse a folder, a FIFO or an unreadable file in one
    # line with a hint (click.Path's own checks printed usage and no hint, #58).
    click.option("--recipe", metavar="FILE", help="YAML of job and GRPOConfig keys."),
    click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                 help="Override a recipe key (repeatable)."),
    click.option("--nodes", type=int, help="Number of nodes (default 1)."),
    click.option("--min-nodes", type=int,
                 help="Let an attempt start on as few as this many nodes when not all are free "
                 "(Slurm --nodes=MIN-MAX; the global batch is kept). Default 0: off."),
    click.option("--procs-per-node", type=int, help="Default: one per GPU (1 on CPU sites)."),
    click.option("--tp", "tensor_parallel_size", type=int, help="vLLM tensor-parallel size."),
    click.option("--vllm-mode", type=click.Choice(["colocate", "server", "auto"]),
                 help="colocate (default): vLLM in every rank; server: `vllm serve`; auto: the faster."),
    click.option("--zero-stage", type=click.IntRange(0, 3),
                 help="DeepSpeed ZeRO stage (default: the plan's)."),
    click.option("--dataset", help="builtin:digits|builtin:sums, a .jsonl/.json/.csv/.parquet "
                 "file, a save_to_disk folder, or a hub id."),
    click.option("--reward", "reward_funcs", multiple=True,
                 help="builtin:NAME, module:function, or an open-r1 name (accuracy, format, ...)."),
    click.option("--seed", type=int, help=f"Training seed (default {DEFAULT_SEED})."),
    click.option("--time", help="Slurm time limit, e.g. 04:00:00."),
    click.option("--name", help="Job name (default from the model)."),
    click.option("--partition", help="Slurm partition (default: the site's)."),
    click.option("--payload", type=click.Choice(["train", "check"]),
                 help="check: a torch.distributed smoke test instead of training."),
    click.option("--run-id", help="Default: NAME-NNNN, the next free number."),
    click.option("--output-root", help="Where run directories go (default: the site's)."),
]
FLAG_NAMES = ("model", "nodes", "min_nodes", "procs_per_node", "tensor_parallel_size", "vllm_mode",
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
    """One clear line per problem and exit code 2 for anything the user can fix."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            for line in exc.lines():
                click.echo(line, err=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpc-grpo")
def main() -> None:
    """GRPO training with TRL, from this machine to a Slurm cluster."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: every key of each profile.")
@user_errors
def sites(as_json: bool) -> None:
    """List the site profiles by name (yours hide built-in ones of the same name); a profile
    that does not load is a warning line on stderr (exit 2 only when none loads)."""
    from hpc_grpo import api

    listing = api.sites()
    if as_json:
        click.echo(json.dumps(api.sites_report(listing), indent=2))
    else:
        for name, profile in listing.loaded.items():
            gpus = f"{profile.gpus_per_node} x {profile.gpu_type or 'GPU'}" \
                if profile.gpus_per_node else "CPU only"
            click.echo(f"{name:<16} {profile.scheduler:<6} {gpus:<14} {profile.description}")
    for name, (path, problem) in listing.broken.items():
        click.echo(f"warning: site profile '{name}' ({path}) does not load: {problem}", err=True)


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


# submit's and resume's: one default, the back end's (a local run is followed, a Slurm job not).
wait_option = click.option(
    "--wait/--no-wait", default=None,
    help="Follow progress until the job ends (default: on for a site of scheduler: local).")


def _follows(wait: bool | None, by_default: bool) -> bool:
    """Whether submit or resume follows the run to its end: as asked, else the back end's
    default (``resume`` followed no local run while ``submit`` did, #58)."""
    return wait if wait is not None else by_default


@main.command()
@job_options
@click.option("--dry-run", is_flag=True, help="Same as render: print, submit nothing.")
@wait_option
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
    if _follows(wait, result.follow):
        from hpc_grpo.runs.views import follow

        sys.exit(follow(result.run_dir, api.progress))  # its id may also name a run in another root


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", is_flag=True, help="Refresh every few seconds until interrupted.")
@user_errors
def status(runs: tuple[str, ...], as_json: bool, watch: bool) -> None:
    """Slurm state joined with training progress, requeues and checkpoint age."""
    from hpc_grpo import api_runs  # the run side alone: no Jinja, YAML or planner
    from hpc_grpo.runs.views import status_table, watch_status

    if watch:
        watch_status(lambda: api_runs.status(runs))
        return
    rows = api_runs.status(runs)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        status_table(rows)


@main.command()
@click.argument("run")
@click.option("--rank", type=int, help="Only this global rank's log.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows.")
@click.option("--json", "as_json", is_flag=True, help="List the log files (path, bytes) instead.")
@user_errors
def logs(run: str, rank: int | None, follow: bool, as_json: bool) -> None:
    """Print a run's per-rank logs (and the node tasks' Slurm logs)."""
    from hpc_grpo import api_runs  # the run side alone
    from hpc_grpo.runs.views import print_logs

    if as_json and follow:
        raise click.UsageError("--json lists the log files once; it cannot --follow")
    paths = api_runs.log_paths(run, rank)
    if as_json:
        click.echo(json.dumps([{"path": str(p), "bytes": p.stat().st_size if p.exists() else None}
                               for p in paths], indent=2))
        return
    print_logs(paths, follow=follow)


@main.command()
@click.argument("run")
@user_errors
def cancel(run: str) -> None:
    """Cancel a run's job (all nodes)."""
    from hpc_grpo import api_runs  # the run side alone

    click.echo(api_runs.cancel(run).message)  # only ever this run's own job


@main.command()
@click.argument("run")
@click.option("--time", help="New Slurm time limit, e.g. 04:00:00.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Change a setting a checkpoint can follow, e.g. max_steps=500 (repeatable).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Continue at another node count (DDP, or ZeRO with its shards converted "
                   "once): the global batch is kept, the per-device batch and accumulation "
                   "replanned.")
@click.option("--procs-per-node", type=click.IntRange(min=1), default=None,
              help="Continue at another number of processes per node (as --nodes).")
@wait_option
@user_errors
def resume(run: str, time: str | None, sets: tuple[str, ...], nodes: int | None,
           procs_per_node: int | None, wait: bool | None) -> None:
    """Continue an unfinished run from its newest complete checkpoint as a new job."""
    from hpc_grpo import api

    result = api.resume(run, sets=sets, time=time, nodes=nodes, procs_per_node=procs_per_node)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if result.layout_change:
        click.echo(result.layout_change, err=True)
    start = (f"from checkpoint-{result.from_step}" if result.from_step
             else "from step 0 (no complete checkpoint)")
    click.echo(f"run {result.run_id}  job {result.job_id}  dir {result.run_dir}  "
               f"resumed {start} after job {result.previous_job_id}")
    if _follows(wait, result.follow):
        from hpc_grpo.runs.views import follow

        sys.exit(follow(result.run_dir, api.progress))


@main.command()
@click.argument("name")
@click.option("--site", required=True, help="Profile name or YAML path: its hf_home is the cache.",
              shell_complete=complete_sites)
@click.option("--revision", default="", help="Branch, tag or commit to pin (default: main).")
@click.option("--dataset", "is_dataset", is_flag=True, help="NAME is a hub dataset, not a model.")
@user_errors
def stage(name: str, site: str, revision: str, is_dataset: bool) -> None:
    """Download a hub model or dataset once, on the login node, into the site's shared cache
    (hf_home) for compute nodes without internet; pins the revision to its commit."""
    from hpc_grpo import api

    staged = api.stage(name, site, revision=revision, dataset=is_dataset)
    click.echo(f"staged {staged.kind} {staged.repo_id} {staged.revision} = commit {staged.commit} "
               f"in {staged.snapshot}")


@main.command("example-model")
@click.argument("directory")
@user_errors
def example_model(directory: str) -> None:
    """Write the tiny offline Qwen2-shaped model and tokenizer used by the examples.

    DIRECTORY: a new or empty folder; one that already holds the example model is left as it
    is, any other is refused."""
    from pathlib import Path

    from hpc_grpo import api

    done = api.example_model("tiny", Path(directory))
    click.echo(f"{done.path} already holds the example model: left as it is" if done.already
               else f"wrote {done.path}")


_CHOICES = {
    "tensor_parallel_size": "TP size",
    "zero_stage": "ZeRO stage",
    "offload_optimizer": "optimizer offload",
    "offload_params": "param offload",
    "gradient_checkpointing": "gradient checkpointing",
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "enable_sleep_mode": "sleep mode",
    "max_num_seqs": "max_num_seqs",
    "vllm_max_model_length": "vllm_max_model_length",
    "lora": "LoRA",
}


def _plan_table(data: dict[str, Any]) -> None:
    from rich.table import Table

    from hpc_grpo.cli_speed import plan_tail
    from hpc_grpo.runs.terminal import console as make_console

    console = make_console(markup=False)
    console.print(f"plan: {data['model']} on site {data['site']}: {data['layout']}; "
                  f"device {data['device']}; precision {data['precision']}")
    memory = data["memory_plan"]
    if memory is None:
        console.print(f"no GPU memory plan: {data['no_memory_plan']}")
        ds = data["deepspeed"]
        vllm = data["vllm"]
        layout = Table(box=None, header_style="bold")
        layout.add_column("layout")
        layout.add_column("value")
        for name, value in (("TP size", data["tensor_parallel_size"]),
                            ("ZeRO stage", ds["zero_stage"] if ds else "off"),
                            ("vLLM", f"{vllm['mode']}" if vllm["enabled"] else "off")):
            layout.add_row(name, str(value))
        console.print(layout)
    else:
        choices = Table(box=None, header_style="bold")
        for column in ("choice", "value", "why"):
            choices.add_column(column, overflow="fold")
        for key, label in _CHOICES.items():
            if key not in memory["reasons"]:
                continue
            value, reason = str(memory.get(key, "on")), memory["reasons"][key]
            first, sep, rest = reason.partition(": ")
            choices.add_row(label, value, rest if sep and first == value else reason)
        console.print(choices)
        breakdown = Table(box=None, header_style="bold")
        breakdown.add_column("per-GPU memory")
        breakdown.add_column("GiB", justify="right")
        for item, gib in memory["breakdown_gib"].items():
            breakdown.add_row(item, f"{gib:.1f}")
        console.print(breakdown)
    plan_tail(console, data)
    changed = [f"  {line}" for line in data["changed_from_recipe"]]  # one block: --set, flags
    for line in [*(f"warning: {w}" for w in data["warnings"]),
                 *(["changed from the recipe:"] if changed else []), *changed]:
        console.print(line)


@main.command()
@job_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--list-models", is_flag=True, help="List the built-in model shapes and exit.")
@user_errors
def plan(as_json: bool, list_models: bool, **kwargs: Any) -> None:
    """The resolved plan render and submit use (TP, ZeRO, offload, vLLM memory), and why."""
    from hpc_grpo import api

    if list_models:
        names = api.model_names()
        click.echo(json.dumps(names, indent=2) if as_json else "\n".join(names))
        return
    data = api.plan(make_request(kwargs))
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        _plan_table(data)


# doctor and site (preflight), export and eval (after training) live beside this module (it is at
# its size limit), drawn the same way.
for _command in [*preflight_commands(user_errors, complete_sites), *posttrain_commands(user_errors)]:
    main.add_command(_command)

if __name__ == "__main__":
    main()
