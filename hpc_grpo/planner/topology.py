"""Where every rank lives: node, global rank, TP group, vLLM seed, data shard.

Pure and stdlib-only. The row rule itself is the contract's ``rank_row`` (TRL's colocated
engines form TP groups of contiguous ranks seeded ``rank // tp``), so the launcher prints exactly
the table the ranks later check; here the layout is checked first: a group must sit inside one
node.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpc_grpo.config.grpo import SEED_MAX
from hpc_grpo.config.site import SiteProfile
from hpc_grpo.config.spec import JobSpec, server_trainers
from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import world_size
from hpc_grpo.rundir.placement import RankRow, rank_row, tp_layout_problem


def check_layout(nodes: int, procs_per_node: int, tp: int) -> None:
    """Refuse layouts TRL would reject on the cluster, before anything is submitted."""
    if nodes < 1:
        raise UserError(f"nodes must be at least 1, got {nodes}", field="nodes")
    if procs_per_node < 1:
        raise UserError(
            f"processes per node must be at least 1, got {procs_per_node}",
            field="procs_per_node",
        )
    problem = tp_layout_problem(tp, procs_per_node)
    if problem:
        divisors = [d for d in range(1, procs_per_node + 1) if procs_per_node % d == 0]
        hint = (f"a TP group must stay inside one node: use at most {procs_per_node} or more "
                "GPUs per node" if tp > procs_per_node else f"use one of {divisors}")
        raise UserError(problem, field="tensor_parallel_size", hint=hint)


def check_rank_seeds(seed: int, world_size: int) -> None:
    """TRL seeds each training process with seed + its rank (accelerate's set_seed with
    device_specific=True, in GRPOTrainer's __init__), and numpy refuses a seed past 2**32 - 1:
    a seed that is fine alone (config/spec_checks.py) must leave room for the last rank."""
    if world_size > 1 and seed + world_size - 1 > SEED_MAX:
        raise UserError(
            f"seed {seed} + rank {world_size - 1} is past numpy's 2**32 - 1: TRL seeds each of "
            f"the {world_size} training processes with seed + its rank", field="seed",
            hint=f"--seed {SEED_MAX - world_size + 1} or lower")


def rank_table(nodes: int, procs_per_node: int, tp: int) -> tuple[RankRow, ...]:
    """Every rank's row; node-major order as a static torchrun rendezvous assigns them."""
    check_layout(nodes, procs_per_node, tp)
    return tuple(rank_row(rank, procs_per_node, tp) for rank in range(world_size(nodes, procs_per_node)))


@dataclass(frozen=True)
class ServerSplit:
    """Server mode: which GPUs of each node train and which serve generation.

    ``trainer_nodes``: the nodes that run torchrun. A dedicated server node is the allocation's
    last node and trains nothing, so trainer_nodes is one less than the job's.
    """

    trainer_gpus: tuple[int, ...]
    server_gpus: tuple[int, ...]
    server_node: int
    idle_gpus_per_node: int
    trainer_nodes: int = 1

    @property
    def dedicated(self) -> bool:
        """The server node trains nothing: it is past the training nodes (the runtime reads
        the same from run.json: runtime/node/vllm_server.py dedicated)."""
        return self.server_node >= self.trainer_nodes

    @property
    def push_across_nodes(self) -> bool:
        """The weights go from trainer rank 0 (node 0) to the server over the link between
        nodes: the server is on another node."""
        return self.server_node > 0


def training_nodes(nodes: int, split: ServerSplit | None) -> int:
    """The nodes that run torchrun: the job's, less a dedicated server node."""
    return split.trainer_nodes if split is not None else nodes


def layout_line(nodes: int, trainers: int, procs_per_node: int, world: int) -> str:
    """'N node(s) x P process(es) = world size W', saying so where the last node only serves."""
    serving = f", the last serving only: {trainers}" if trainers != nodes else ""
    return f"{nodes} node(s){serving} x {procs_per_node} process(es) = world size {world}"


def server_split(nodes: int, gpus_per_node: int, server_gpus: int) -> ServerSplit:
    """Reserve ``server_gpus`` on the last node for ``vllm serve``; trainers take the rest.

    torchrun needs the same process count on every node, so every node trains on the GPUs the
    server node has left; on other nodes the reserved slots stay idle (shown in the plan).
    A server given all of a node's GPUs (always so with one GPU a node) takes a node of its own:
    the other nodes train on all of theirs, nothing idles, and the weights reach the server over
    the link between the nodes.
    """
    if not 1 <= server_gpus <= gpus_per_node:
        raise UserError(
            f"server GPUs must be between 1 and {gpus_per_node}, got {server_gpus}",
            field="vllm_server_gpus",
        )
    trainer_nodes, _ = server_trainers(nodes, gpus_per_node, server_gpus)
    if trainer_nodes < nodes:
        return ServerSplit(trainer_gpus=tuple(range(gpus_per_node)),
                           server_gpus=tuple(range(server_gpus)), server_node=nodes - 1,
                           idle_gpus_per_node=0, trainer_nodes=trainer_nodes)
    if gpus_per_node < 2:
        raise UserError(
            "server mode needs 2 GPUs: one generating, one training; this job has "
            f"{nodes} node(s) of {gpus_per_node} GPU",
            field="vllm_mode",
            hint="use --nodes 2 (the last node serves) or the default colocate mode",
        )
    if server_gpus == gpus_per_node:
        raise UserError(
            f"server GPUs {server_gpus} leave no GPU to train on this job's only node",
            field="vllm_server_gpus",
            hint=f"use at most {gpus_per_node - 1}, or --nodes 2 for a server node of its own",
        )
    return ServerSplit(
        trainer_gpus=tuple(range(server_gpus, gpus_per_node)),
        server_gpus=tuple(range(server_gpus)),
        server_node=nodes - 1,
        idle_gpus_per_node=server_gpus if nodes > 1 else 0,
        trainer_nodes=nodes,
    )


def processes(site: SiteProfile, spec: JobSpec) -> tuple[int, ServerSplit | None]:
    """Training processes per node, and the server split in server mode (planner/job.py)."""
    procs = spec.procs_per_node or site.default_procs_per_node
    if site.device == "cuda" and spec.vllm_mode == "server":
        split = server_split(spec.nodes, site.gpus_per_node, spec.vllm_server_gpus)
        return len(split.trainer_gpus), split
    if site.device == "cuda" and procs > site.gpus_per_node:
        raise UserError(
            f"{procs} processes per node but the site has {site.gpus_per_node} GPUs per node",
            field="procs_per_node",
            hint="one process per GPU: leave --procs-per-node unset",
        )
    return procs, None


def layout_notes(device: str, site_name: str, spec: JobSpec, planned: object) -> list[str]:
    """Warnings about the layout the plan could not size or that means less than it says:
    a GPU job without a memory plan or server split (``planned`` falsy: architecture unknown),
    TP > 1 on a CPU site. Refuses what cannot run on the site's device at all (QLoRA on CPU:
    otherwise every rank fails on its first line, after the queue wait)."""
    tp = spec.tensor_parallel_size
    if device == "cpu" and spec.use_peft and spec.load_in_4bit:
        raise UserError(f"load_in_4bit (QLoRA) needs CUDA GPUs (bitsandbytes 4-bit kernels); "
                        f"site '{site_name}' trains on CPU", field="load_in_4bit",
                        hint="drop load_in_4bit and keep use_peft: true for LoRA in full precision")
    notes = []
    if device == "cuda" and not planned:
        notes.append("model architecture unknown: TP 1 and TRL's vLLM defaults, no memory plan")
    if device == "cpu" and tp > 1:
        notes.append(f"tensor_parallel_size {tp} on CPU site '{site_name}' only groups ranks "
                     f"(vLLM seed rank // {tp}): no vLLM runs on CPU, each process generates "
                     "alone with transformers")
    return notes
