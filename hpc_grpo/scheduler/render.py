"""Render the job script and the rank table from a plan: pure text in, text out.

No Slurm call, clock or hostname: the same plan and run id always give the same bytes, which is
what makes ``render`` a faithful dry run and golden files possible.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from hpc_grpo import __version__
from hpc_grpo.errors import UserError
from hpc_grpo.planner.job import JobPlan
from hpc_grpo.planner.topology import layout_line
from hpc_grpo.rundir.contract import (
    PORTS_PER_JOB,
    VLLM_SERVER_PORT_OFFSET,
    WEIGHT_SYNC_PORT_OFFSET,
    port_slots,
)
from hpc_grpo.scheduler.jobscript import (
    MODULE_INITS,
    allocation_options,
    apptainer_options,
    gpu_request,
    job_cpus,
    pyxis_options,
)
from hpc_grpo.scheduler.slurm_backend import submitit_folder

# sbatch parses #SBATCH lines itself (no shell), so their values must be plain tokens. Both are
# used with fullmatch: ``$`` also matches before a trailing newline, which let 'x\n' through
# into the script, ending its line there.
_DIRECTIVE_SAFE = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _port_slots(plan: JobPlan) -> int:
    """How many jobs' port triples fit the profile's range (the script and summary agree)."""
    low, high = plan.site.port_range
    return port_slots(low, high)


def templates_dir() -> Path:
    package = Path(__file__).resolve().parents[1]  # the wheel puts them inside the package
    for candidate in (package / "sbatch_templates", package.parent / "sbatch_templates"):
        if candidate.is_dir():
            return candidate
    raise UserError("no sbatch_templates directory found", hint="reinstall hpc-grpo")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env


def _directive(value: str, field: str) -> str:
    """A value for an #SBATCH line, where no shell quoting applies: a plain token or refused."""
    if value and not _DIRECTIVE_SAFE.fullmatch(value):
        raise UserError(
            f"{value!r} cannot go into an #SBATCH line",
            field=field,
            hint="use letters, digits and . _ - : / only",
        )
    return value


def _comment(value: str, field: str) -> str:
    """A value for the header comment (above the #SBATCH lines): a line break in it would start
    a line bash runs as a command, and sbatch stops reading directives at it."""
    if not value.isprintable():
        raise UserError(f"{value!r} holds a line break or control character", field=field,
                        hint="a single line of printable characters")
    return value


def _output_dir(run_dir: str) -> str:
    """The run directory for #SBATCH --output and srun --output, which read % as a file-name
    pattern (%j the job id...): a % in it sends the logs to another directory than status
    reads them from."""
    _directive(run_dir, "output_root")
    if "%" in run_dir:
        raise UserError(f"{run_dir!r} holds a %, which Slurm reads as a log file-name pattern",
                        field="output_root", hint="an output root without %")
    return run_dir


def _container_prefix(plan: JobPlan) -> str:
    box = plan.site.container
    if box is None:
        return ""
    if box.runtime == "pyxis":
        return " ".join(shlex.quote(w) for w in pyxis_options(plan.site)) + " "
    words = ["apptainer", "exec", *apptainer_options(plan.site)]
    return " ".join(shlex.quote(w) for w in words) + " "


def sbatch_nodes(nodes: int, min_nodes: int) -> str:
    """sbatch's --nodes value: the count, or ``MIN-MAX`` where the run allows fewer nodes
    (``min_nodes``): Slurm then starts each attempt, the first and every requeue, as soon as
    MIN of the nodes are free, on as many as are free up to MAX; it has no wait for MAX. A range
    goes without ``--ntasks-per-node=1``: sbatch then fixes the task count at MIN x 1 and Slurm
    (22.05, the sandbox) granted MIN nodes with all four idle; without it the job has one task
    a node, on as many nodes as are free (srun's node tasks likewise)."""
    return f"{min_nodes}-{nodes}" if min_nodes else str(nodes)


def render_script(plan: JobPlan, *, run_id: str, run_dir: str, python: str) -> str:
    """The exact text ``submit`` hands to sbatch (or, for the local site, runs)."""
    _comment(run_id, "run_id")
    _output_dir(run_dir)
    for value, field in ((plan.site.account, "account"), (plan.site.qos, "qos"),
                         (plan.site.gpu_type, "gpu_type")):
        _directive(value, field)
    for key in plan.site.env:
        if not _ENV_NAME.fullmatch(key):
            raise UserError(f"{key!r} is not a valid environment variable name", field="env")
    low = plan.site.port_range[0]
    hours, mins = divmod(plan.time_min, 60)
    template = "local.sh.j2" if plan.site.scheduler == "local" else "slurm.sbatch.j2"
    partition = _directive(plan.spec.partition or plan.site.partition, "partition")
    return _environment().get_template(template).render(
        version=__version__,
        run_id=run_id,
        run_dir=run_dir,
        site=plan.site,  # its name, in the header comment: one line (SiteProfile checks it)
        job_name=_directive(plan.job_name, "name"),
        allocation=allocation_options(plan.site, partition),
        cpus_per_task=job_cpus(plan.site),  # doctor sizes the job's memory from the same
        gpu_request=gpu_request(plan.site),
        module_inits=" ".join(MODULE_INITS),
        nodes=sbatch_nodes(plan.nodes, plan.spec.min_nodes),
        node_range=bool(plan.spec.min_nodes),  # no --ntasks-per-node: sbatch_nodes says why
        procs_per_node=plan.procs_per_node,
        time=f"{hours:02d}:{mins:02d}:00",
        folder=submitit_folder(run_dir),
        env=sorted(plan.site.public_env.items()),
        secrets=sorted(plan.site.secret_values),
        port_low=low,
        port_slots=_port_slots(plan),
        port_stride=PORTS_PER_JOB,
        python=shlex.quote(python),
        container_prefix=_container_prefix(plan),
        server_mode=plan.server is not None,
        signal_lead_s=plan.signal_lead_s,
        signal_after_s=max(1, plan.time_min * 60 - plan.signal_lead_s),
        batch_signals=plan.stop.forwarded_by_batch_shell(),
    )


@dataclass(frozen=True)
class Rendezvous:
    master_addr: str
    master_port: str


def rendezvous(plan: JobPlan) -> Rendezvous:
    low, high = plan.site.port_range
    slots = _port_slots(plan)
    if plan.site.scheduler == "local":
        return Rendezvous("127.0.0.1", f"{PORTS_PER_JOB} consecutive ports free on this machine at start")
    return Rendezvous(
        "first host of $SLURM_JOB_NODELIST",
        f"{low} + (SLURM_JOB_ID % {slots}) x {PORTS_PER_JOB}  [range {low}-{high}; "
        f"+{VLLM_SERVER_PORT_OFFSET} vLLM server, +{WEIGHT_SYNC_PORT_OFFSET} weight sync]",
    )


def rank_table_text(plan: JobPlan) -> str:
    """node -> rank -> TP group -> vLLM seed -> data shard, as a fixed-width table."""
    header = ("node", "rank", "local", "tp_group", "tp_rank", "vllm_seed", "dp_shard")
    rows = [header] + [
        tuple(str(v) for v in (r.node, r.rank, r.local_rank, r.tp_group, r.tp_rank,
                               r.vllm_seed, r.dp_shard))
        for r in plan.ranks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows) + "\n"


def summary_text(plan: JobPlan) -> str:
    """What render prints after the script: rendezvous, layout and the rank table."""
    rdzv = rendezvous(plan)
    vllm = plan.vllm
    lines = [
        f"# rendezvous: MASTER_ADDR = {rdzv.master_addr}; MASTER_PORT = {rdzv.master_port}",
        f"# layout: {layout_line(plan.nodes, plan.training_nodes, plan.procs_per_node, plan.world_size)}"
        f"; device {plan.device}; TP {plan.tensor_parallel_size}",
        "# vLLM: " + (
            f"{vllm.mode}, gpu_memory_utilization {vllm.gpu_memory_utilization}, "
            f"sleep mode {'on' if vllm.enable_sleep_mode else 'off'}"
            if vllm.enabled else "off (CPU site: generation through transformers)"
        ),
        "# DeepSpeed: " + (
            f"ZeRO-{plan.deepspeed.zero_stage}"
            + (" + optimizer offload" if plan.deepspeed.offload_optimizer else "")
            if plan.deepspeed else "off"
        ),
        *([f"# min_nodes {plan.spec.min_nodes}: an attempt starts on {plan.spec.min_nodes}-"
           f"{plan.nodes} nodes, as many as are free, the global batch kept "
           "(sbatch --nodes=MIN-MAX)"] if plan.spec.min_nodes else []),
        f"# requeue signal: {plan.site.requeue_signal} {plan.signal_lead_reason}",
        f"# collective timeout: {plan.collective_timeout_reason}",
    ]
    if plan.server is not None and plan.server.dedicated:
        lines.append(
            f"# server mode: node {plan.server.server_node} GPUs {list(plan.server.server_gpus)}"
            f" run vllm serve and no trainer; "
            + (f"nodes 0-{plan.training_nodes - 1}" if plan.training_nodes > 1 else "node 0")
            + f" train on GPUs {list(plan.server.trainer_gpus)}"
        )
    elif plan.server is not None:
        lines.append(
            f"# server mode: node {plan.server.server_node} GPUs {list(plan.server.server_gpus)}"
            f" run vllm serve; GPUs {list(plan.server.trainer_gpus)} train on every node"
        )
    lines += [f"# {plan.step_time.line()}"] if plan.step_time else []
    lines += [f"# warning: {w}" for w in plan.warnings]
    return "\n".join(lines) + "\n" + rank_table_text(plan)
