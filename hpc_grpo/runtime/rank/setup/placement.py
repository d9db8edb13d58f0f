"""Checks every rank runs before the first step, so a wrong layout fails in seconds, not hours.

The pure functions recompute a rank's row of the table from its environment and compare it
with run.json; `run_rank_checks` gathers every rank's view so all ranks fail with one message.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.placement import rank_row, tp_layout_problem

ROW_FIELDS = ("node", "rank", "local_rank", "tp_group", "tp_rank", "vllm_seed")


class RuntimeCheckError(RuntimeError):
    """A layout or environment problem found on the ranks before training."""


def expected_row(rank: int, procs_per_node: int, tp: int) -> dict[str, int]:
    """The table row for a global rank, by the contract's one rule."""
    return rank_row(rank, procs_per_node, tp).to_dict()


def layout_problems(run: RunRecord) -> list[str]:
    """Problems with the plan itself (the same on every rank)."""
    problems = []
    tp_problem = tp_layout_problem(run.vllm.tensor_parallel_size, run.procs_per_node)
    if tp_problem:
        problems.append(f"vllm {tp_problem} (TP groups are contiguous ranks inside one node)")
    if len(run.ranks) != run.world_size:
        problems.append(f"run.json has {len(run.ranks)} rank rows, expected {run.world_size}")
    vllm = run.vllm
    if vllm.enabled and vllm.mode == "colocate":
        server_keys = sorted(k for k in run.grpo_config if k.startswith("vllm_server"))
        if vllm.server or server_keys:
            problems.append(
                "vllm mode is colocate but a vLLM server setting is given "
                f"(server={vllm.server!r}, grpo_config keys {server_keys})"
            )
    return problems


def own_row_problems(run: RunRecord, env: Mapping[str, str]) -> tuple[dict[str, int], list[str]]:
    """Recompute this rank's row from torchrun's and Slurm's variables and compare with run.json."""
    problems: list[str] = []
    try:
        rank, local_rank, world = (int(env[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    except (KeyError, ValueError) as exc:
        raise RuntimeCheckError(f"RANK/LOCAL_RANK/WORLD_SIZE not set by torchrun: {exc}") from exc
    ppn, nodes = run.procs_per_node, run.nodes
    row = expected_row(rank, ppn, run.vllm.tensor_parallel_size)
    if world != run.world_size:
        problems.append(f"WORLD_SIZE={world} but nodes {nodes} x procs_per_node {ppn} != {world}")
    if local_rank != row["local_rank"]:
        problems.append(f"rank {rank}: LOCAL_RANK={local_rank}, expected {row['local_rank']}")
    for var in ("SLURM_NODEID", "GROUP_RANK"):
        if env.get(var, "") != "" and int(env[var]) != row["node"]:
            problems.append(f"rank {rank}: {var}={env[var]}, expected node {row['node']}")
    if "LOCAL_WORLD_SIZE" in env and int(env["LOCAL_WORLD_SIZE"]) != ppn:
        problems.append(f"rank {rank}: LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']} != {ppn}")
    table = {r.rank: r for r in run.ranks}
    planned = table.get(rank)
    if planned is None:
        problems.append(f"rank {rank}: no row in run.json ranks")
    else:
        problems.extend(row_mismatches(row, planned.to_dict()))
    return row, problems


def row_mismatches(expected: Mapping[str, Any], planned: Mapping[str, Any]) -> list[str]:
    """Fields where run.json's row differs from the recomputed one."""
    return [
        f"rank {expected['rank']}: run.json has {f}={planned.get(f)!r}, rank computes {expected[f]}"
        for f in ROW_FIELDS
        if f in planned and int(planned[f]) != expected[f]
    ]


def gathered_problems(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Cross-rank consistency: one host per node and TP group, one seed per group, no shared GPU."""
    problems: list[str] = []
    by_node: dict[int, set[str]] = {}
    by_group: dict[int, set[tuple[str, int]]] = {}
    devices: dict[str, int] = {}
    for r in rows:
        by_node.setdefault(int(r["node"]), set()).add(str(r["hostname"]))
        member = (str(r["hostname"]), int(r["vllm_seed"]))
        by_group.setdefault(int(r["tp_group"]), set()).add(member)
        dev = r.get("device_id")
        if dev:
            if dev in devices:
                problems.append(f"ranks {devices[dev]} and {r['rank']} share device {dev}")
            devices[str(dev)] = int(r["rank"])
    for node, hosts in sorted(by_node.items()):
        if len(hosts) > 1:
            problems.append(f"node {node} ranks run on several hosts: {sorted(hosts)}")
    seen_seeds: dict[int, int] = {}
    for group, members in sorted(by_group.items()):
        if len(members) > 1:
            problems.append(f"TP group {group} spans hosts/seeds {sorted(members)}")
        for _, seed in members:
            if seed in seen_seeds and seen_seeds[seed] != group:
                problems.append(f"TP groups {seen_seeds[seed]} and {group} share vllm seed {seed}")
            seen_seeds.setdefault(seed, group)
    return problems


def cuda_problems(n_gpu: int, device_index: int | None, local_rank: int, visible: int) -> list[str]:
    """One device per process, chosen by LOCAL_RANK, or Trainer wraps the model in DataParallel."""
    problems = []
    if n_gpu != 1:
        problems.append(f"Trainer sees n_gpu={n_gpu}; expected 1 (it would use nn.DataParallel)")
    want = local_rank if visible > 1 else 0
    if device_index != want:
        problems.append(
            f"LOCAL_RANK {local_rank} uses cuda:{device_index} ({visible} visible), expected {want}"
        )
    return problems


def run_rank_checks(
    run: RunRecord, run_dir: Path, device_id: str = "", extra: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Gather every rank's row and problems; all ranks raise one error, or rank 0 writes ranks.json.

    The all_gather is reached by every rank even when its own checks fail, so no rank hangs.
    """
    import torch.distributed as dist  # here: the module imports without torch

    row, problems = own_row_problems(run, os.environ)
    problems = layout_problems(run) + problems + list(extra)
    mine = {**row, "hostname": socket.gethostname(), "pid": os.getpid(), "device_id": device_id}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (mine, problems))
    rows = [g[0] for g in gathered]
    every = [p for g in gathered for p in g[1]]
    every += gathered_problems(rows)
    unique = list(dict.fromkeys(every))
    if unique:
        message = "rank checks failed: " + "; ".join(unique)
        if dist.get_rank() == 0:
            rundir.update_state(run_dir, phase="failed", message=message)
        raise RuntimeCheckError(message)
    if dist.get_rank() == 0:
        rundir.write_json_atomic(
            run_dir / contract.RANKS_JSON,
            {"checked_at": time.time(), "world_size": len(rows), "ranks": rows},
        )
    return rows
