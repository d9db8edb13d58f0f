"""The on-node half of ``hpc-grpo doctor --bandwidth``: a short all-reduce sweep, timed.

``python -m hpc_grpo.runtime.linkbench`` runs on every rank, started by srun (N nodes x P tasks:
SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, the first node of the step as the
rendezvous host, the port the site's range gives the job) or by torchrun (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT). NCCL where CUDA is present, else Gloo, as a job would.

Two figures, each the bus bandwidth of an all-reduce (``2 (n-1)/n x bytes / seconds``, GB/s of
1e9 bytes, what nccl-tests calls busbw), at the largest size the time bound allowed:
- between nodes: one rank per node (each node's first), the others idle;
- inside a node: the ranks of one node together, every node at once; the slowest node's figure.
Rank 0 prints one report (the probe's chunked lines, ``probe_lines``) that doctor reads and
caches. Stdlib and torch only; bounded: sizes stop once the next would pass ``--max-seconds``,
and a watchdog ends the process ``--max-seconds`` + 60 s after it starts whatever happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpc_grpo.rundir.contract import dist_backend, job_port
from hpc_grpo.runtime.probe import expand_hostlist
from hpc_grpo.runtime.probe_lines import report_lines
from hpc_grpo.runtime.shared.signals import give_up_after

KIND = "links"
MIB = 2**20


@dataclass(frozen=True)
class Layout:
    rank: int
    world: int
    local_rank: int
    master_addr: str
    master_port: int


def layout(env: Mapping[str, str], port_range: tuple[int, int] | None = None) -> Layout:
    """Where this rank stands: torchrun's variables first, else srun's (the rendezvous on the
    step's first node, at the port the site's range gives this job id)."""
    if "RANK" in env and "MASTER_ADDR" in env:
        return Layout(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                      env["MASTER_ADDR"], int(env.get("MASTER_PORT", 29500)))
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    hosts = expand_hostlist(nodelist)
    if "SLURM_PROCID" not in env or not hosts:
        raise SystemExit("linkbench: neither torchrun (RANK, MASTER_ADDR) nor srun "
                         "(SLURM_PROCID, SLURM_STEP_NODELIST) variables are set")
    low, high = port_range or (29500, 29599)
    port = job_port(low, high, int(env.get("SLURM_JOB_ID", "0") or 0))
    return Layout(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]),
                  int(env.get("SLURM_LOCALID", 0)), hosts[0], port)


def bus_gbs(nbytes: int, seconds: float, ranks: int) -> float:
    """All-reduce bus bandwidth in GB/s (1e9 bytes): what each link carries, so that figures of
    groups of different sizes compare (nccl-tests' busbw)."""
    if ranks < 2 or seconds <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / seconds / 1e9


def groups_of(hosts: Sequence[str]) -> tuple[list[int], list[list[int]]]:
    """(each node's first rank, the ranks of each node) from every rank's host name, in rank
    order; nodes in the order their first rank comes."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    nodes = list(by_host.values())
    return [ranks[0] for ranks in nodes], nodes


def next_fits(spent_s: float, last_s: float, grow: float, iterations: int, budget_s: float) -> bool:
    """Whether the next size's estimated time (the last one's per-iteration time, grown with the
    size, times the iterations of both phases) still fits the budget."""
    return spent_s + 2 * last_s * grow * iterations <= budget_s


def summary(sizes: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    """The figure at the largest size measured for ``key`` ("inter"/"intra"), with every size."""
    done = [s for s in sizes if s.get(key) is not None]
    if not done:
        return None
    last = done[-1]
    return {"gbs": last[key], "mib": last["mib"], "by_size": {str(s["mib"]): s[key] for s in done}}


def _timed(dist: Any, tensor: Any, group: Any, iterations: int, warmup: int,
           sync: Callable[[], None]) -> float:
    """Seconds per all-reduce of ``tensor`` in ``group``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    sync()
    dist.all_reduce(tensor[:1], group=group)  # start together
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    sync()
    return (time.perf_counter() - start) / iterations


def _one_size(dist: Any, torch: Any, mib: int, args: argparse.Namespace, where: Layout,
              device: Any, sync: Callable[[], None], inter: Any, leaders: Sequence[int],
              intra: Any, nodes: Sequence[Sequence[int]], hosts: Sequence[Any]) -> dict[str, Any]:
    """One size: between nodes (the leaders), then inside every node at once; every rank gets
    the same row (the seconds are gathered)."""
    tensor = torch.ones(mib * MIB // 4, dtype=torch.float32, device=device)
    own = [0.0, 0.0]
    if inter is not None and where.rank in leaders:
        own[0] = _timed(dist, tensor, inter, args.iterations, args.warmup, sync)
    dist.barrier()
    if intra is not None:
        own[1] = _timed(dist, tensor, intra, args.iterations, args.warmup, sync)
    seconds: list[Any] = [None] * where.world
    dist.all_gather_object(seconds, own)
    row: dict[str, Any] = {"mib": mib, "inter": None, "intra": None,
                           "slowest_s": max(max(s) for s in seconds)}
    if inter is not None:
        row["inter"] = round(bus_gbs(mib * MIB, seconds[0][0], len(leaders)), 3)
    per_node = {str(hosts[r[0]]): round(bus_gbs(mib * MIB, seconds[r[0]][1], len(r)), 3)
                for r in nodes if len(r) > 1}
    if per_node:
        row["intra"], row["intra_by_node"] = min(per_node.values()), per_node
    return row


def sweep(args: argparse.Namespace, where: Layout) -> dict[str, Any]:
    """Join the group, time each size between nodes and inside nodes; rank 0's report."""
    import torch  # here: the module imports without torch
    import torch.distributed as dist  # here: the module imports without torch

    began = time.monotonic()
    cuda = torch.cuda.is_available() and args.device != "cpu"
    backend = dist_backend("cuda" if cuda else "cpu")
    device = torch.device("cpu")
    if cuda:
        device = torch.device("cuda", where.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    limit = datetime.timedelta(seconds=args.max_seconds + 30)
    dist.init_process_group(backend, init_method=f"tcp://{where.master_addr}:{where.master_port}",
                            rank=where.rank, world_size=where.world, timeout=limit)
    hosts: list[Any] = [None] * where.world
    dist.all_gather_object(hosts, socket.gethostname())
    leaders, nodes = groups_of([str(h) for h in hosts])
    inter = dist.new_group(leaders) if len(leaders) > 1 else None
    intra = [dist.new_group(ranks) if len(ranks) > 1 else None for ranks in nodes]
    mine = next(i for i, ranks in enumerate(nodes) if where.rank in ranks)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    sizes: list[dict[str, Any]] = []
    last_s, previous = 0.0, 0
    nothing = inter is None and all(group is None for group in intra)  # 1 node x 1 process
    for mib in [] if nothing else args.sizes_mib:
        spent = time.monotonic() - began
        fits = torch.tensor([1.0 if not sizes or next_fits(spent, last_s, mib / previous,
                                                           args.iterations + args.warmup,
                                                           args.max_seconds) else 0.0],
                            device=device)
        dist.all_reduce(fits, op=dist.ReduceOp.MIN)  # every rank stops at the same size
        if fits.item() < 1:
            break
        sizes.append(_one_size(dist, torch, mib, args, where, device, sync, inter, leaders,
                               intra[mine], nodes, hosts))
        last_s, previous = sizes[-1].pop("slowest_s"), mib
    dist.barrier()
    dist.destroy_process_group()
    return {"kind": KIND, "backend": backend, "device": device.type, "nodes": len(nodes),
            "procs_per_node": max(len(r) for r in nodes), "world_size": where.world,
            "hosts": [str(hosts[r[0]]) for r in nodes], "job_id": os.environ.get("SLURM_JOB_ID", ""),
            "inter": summary(sizes, "inter"), "intra": summary(sizes, "intra"),
            "intra_by_node": sizes[-1].get("intra_by_node", {}) if sizes else {},
            "sizes": sizes, "elapsed_s": round(time.monotonic() - began, 2),
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hpc_grpo.runtime.linkbench")
    parser.add_argument("--sizes-mib", default="4,16,64,256",
                        type=lambda s: [int(x) for x in s.split(",") if x.strip()])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--port-low", type=int, default=29500)
    parser.add_argument("--port-high", type=int, default=29599)
    parser.add_argument("--interface", default="", help="NCCL/GLOO_SOCKET_IFNAME, as a job sets")
    parser.add_argument("--device", choices=("auto", "cpu"), default="auto")
    parser.add_argument("--container", default="", help="accepted from doctor's node command")
    parser.add_argument("--out", default="", help="also write rank 0's report here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    give_up_after(args.max_seconds + 60, "linkbench")
    for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if args.interface:
            os.environ.setdefault(name, args.interface)
    where = layout(os.environ, (args.port_low, args.port_high))
    try:
        report = sweep(args, where)
    except Exception as exc:  # one line doctor can show, from each rank that saw it
        report = {"kind": KIND, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                  if str(exc) else type(exc).__name__, "host": socket.gethostname(),
                  "rank": where.rank}
        print(f"linkbench: rank {where.rank}: {report['error']}", file=sys.stderr, flush=True)
        if where.rank != 0:
            return 1
    if where.rank == 0:
        for line in report_lines(report):
            print(line, flush=True)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(report, handle, indent=2)
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
