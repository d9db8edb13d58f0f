"""The control-plane smoke payload: rendezvous, one all_reduce, one all_gather, one file per rank.

Proves MASTER_ADDR/PORT, node ranks and the network between nodes before any GPU time is spent.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import CHECK
from hpc_grpo.runtime.shared import attempt_nodes


def expected_sum(world_size: int) -> int:
    """Sum of rank+1 over all ranks."""
    return world_size * (world_size + 1) // 2


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.rank.smoke RUN_DIR`, started by torchrun on every rank."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hpc_grpo.runtime.rank.smoke RUN_DIR", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the node task's agent ignores it for trainers
    run_dir = Path(args[0])
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    rundir.redirect_output(run_dir, rank)
    run = attempt_nodes.for_rank(rundir.load_run(run_dir), os.environ)  # min_nodes: this attempt's

    import torch  # here: the module imports without torch
    import torch.distributed as dist  # here: the module imports without torch

    cuda = run.device == "cuda"
    backend = run.backend
    device = torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    dist.init_process_group(backend=backend)
    world = dist.get_world_size()
    value = torch.tensor([rank + 1], dtype=torch.int64, device=device)
    dist.all_reduce(value)
    hostnames: list[object] = [None] * world
    dist.all_gather_object(hostnames, socket.gethostname())
    total, expected = int(value.item()), expected_sum(world)
    report = {
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world,
        "hostname": socket.gethostname(),
        "node_id": int(os.environ.get("SLURM_NODEID") or os.environ.get("GROUP_RANK") or 0),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": os.environ.get("MASTER_PORT"),
        "allreduce": total,
        "expected": expected,
        "hostnames": hostnames,
        "backend": backend,
        # what the site's modules did, as a rank sees it (the job script loaded them)
        "path": os.environ.get("PATH", "").split(os.pathsep),
        "loaded_modules": os.environ.get("LOADEDMODULES", ""),
        "hpc_grpo_env": {k: v for k, v in os.environ.items() if k.startswith("HPC_GRPO_")},
    }
    rundir.write_json_atomic(run_dir / CHECK / f"rank-{rank}.json", report)
    print(
        f"check: rank {rank}/{world} on {report['hostname']}: all_reduce {total} (expected {expected})",
        flush=True,
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
