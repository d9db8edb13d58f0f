"""`hpc-grpo doctor` and `hpc-grpo site init`: the preflight commands, in the thin Click layer.

Kept beside cli.py (at its size limit) and added to its group there, as cli_posttrain's are;
like every command they parse, call one ``api`` function and print. ``user_errors`` and
``complete_sites`` are cli.py's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click


def preflight_commands(user_errors: Callable[..., Any],
                       complete_sites: Callable[..., list[str]]) -> list[click.Command]:
    """``doctor`` and the ``site`` group, wrapped in the CLI's handling of UserError."""

    @click.command()
    @click.option("--site", "site_name", required=True, help="Profile name or YAML path.",
                  shell_complete=complete_sites)
    @click.option("--nodes", type=click.IntRange(min=1), help="Default: 2 (1 where the site has 1).")
    @click.option("--partition", default="", help="Default: the site's.")
    @click.option("--output-root", default="", help="Directory to prove shared (default: the site's).")
    @click.option("--timeout", "timeout_s", type=click.IntRange(min=10), default=180,
                  show_default=True, help="Seconds to wait for the job, queueing included.")
    @click.option("--model", default="",
                  help="Also compare this model's planned checkpoint and save memory with each "
                       "node's free output space and memory.")
    @click.option("--bandwidth", is_flag=True,
                  help="Then time the links in a second short job (the site's processes and GPUs "
                       "per node): all-reduce bus bandwidth between nodes and inside a node, "
                       "cached for plan.")
    @click.option("--output-bandwidth", is_flag=True,
                  help="Then time the output root's writes in a second short job: every rank of "
                       "every node writes its share at once (with --model, its part of the "
                       "planned checkpoint; else 1 GiB), fsync'd and removed; GB/s per node and "
                       "in total, free space and quota, cached for plan.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @user_errors
    def doctor(site_name: str, nodes: int | None, partition: str, output_root: str,
               timeout_s: int, model: str, bandwidth: bool, output_bandwidth: bool,
               as_json: bool) -> None:
        """Check the cluster with a short job: exit 0 all pass, 1 a check failed, 2 bad input."""
        from hpc_grpo import api
        from hpc_grpo.preflight import doctor as checks

        result = api.doctor(site_name, nodes, partition, output_root, timeout_s, model,
                            bandwidth=bandwidth, output_bandwidth=output_bandwidth)
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2))
        else:
            checks.print_table(result)
        sys.exit(result.exit_code)

    @click.group("site")
    def site_group() -> None:
        """Create site profiles."""

    @site_group.command("init")
    @click.argument("name")
    @click.option("--partition", default="", help="Default: the cluster's default partition.")
    @click.option("--output", metavar="FILE", default="",
                  help="Default: NAME.yaml in your site directory.")
    @click.option("--force", is_flag=True, help="Replace an existing file.")
    @click.option("--local", is_flag=True,
                  help="Profile this machine (nvidia-smi, CPUs, memory), not a Slurm cluster; "
                       "the default where no scontrol or sinfo is on PATH.")
    @user_errors
    def site_init(name: str, partition: str, output: str, force: bool, local: bool) -> None:
        """Write a starting profile from the live cluster (sinfo/scontrol), or from this
        machine: check it, then doctor (a cluster) or plan (this machine)."""
        from hpc_grpo import api

        path, info = api.init_site(name, partition, output, force, local)
        use = name if not output else str(path)
        gpus = info["gpus_per_node"] or "no"
        if info["scheduler"] == "local":
            kind = f" {info['gpu_type']} ({info['gpu_memory_gib']:g} GiB each)" \
                if info["gpus_per_node"] else ""
            click.echo(f"wrote {path}: this machine, {gpus} GPUs{kind}, {info['cpus_per_node']} "
                       f"CPUs, {info['cpu_memory_gib']:g} GiB")
            click.echo(f"next: `hpc-grpo plan --site {use} --model MODEL`")
            return
        click.echo(f"wrote {path}: partition {info['partition']}, {info['cpus_per_node']} CPUs and "
                   f"{gpus} GPUs per node, max_time {info['max_time']}")
        click.echo(info["links"])
        click.echo(f"next: edit what Slurm cannot know, then `hpc-grpo doctor --site {use}"
                   f"{'' if info['links_known'] else ' --bandwidth'}`")

    return [doctor, site_group]
