"""The rank's process group and device: the first thing a rank does after its signal handlers,
and the CUDA checks that need both (two ranks on one GPU, a Trainer on another device than the
rank pinned). torch and DeepSpeed are imported here, with the collector paused
(rank/setup/startup_heap.py). On CPU ranks DeepSpeed's shared-memory op is not built
(``skip_inference_op``)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.setup import startup_heap
from hpc_grpo.runtime.rank.setup.placement import cuda_problems


def setup_distributed(run: RunRecord) -> Any:
    """Pin this rank's device and start the process group; returns the device for collectives."""
    with startup_heap.collector_paused(os.environ):
        import torch  # here: the module imports without torch
        import torch.distributed as dist  # here: the module imports without torch
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    if run.device == "cuda":
        index = local_rank if torch.cuda.device_count() > 1 else 0
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    timeout = timedelta(seconds=run.collective_timeout_s)  # the plan's (planner/timeouts.py)
    if not dist.is_initialized():
        dist.init_process_group(backend=run.backend, timeout=timeout)
    if run.deepspeed is not None:
        with startup_heap.collector_paused(os.environ):
            import deepspeed  # its comm layer must wrap our group, or zero.Init sees world size 1

        if run.device != "cuda":  # no JIT build of an op training never calls
            skip_inference_op()
        deepspeed.init_distributed(dist_backend=run.backend, timeout=timeout)
    return device


def device_problems(run: RunRecord, args: Any, device: Any) -> tuple[str, list[str]]:
    """On CUDA: the device's UUID (to catch two ranks on one GPU) and n_gpu/LOCAL_RANK checks."""
    if run.device != "cuda":
        return "", []
    import torch  # here: the module imports without torch

    local_rank = int(os.environ["LOCAL_RANK"])
    problems = cuda_problems(args.n_gpu, args.device.index, local_rank, torch.cuda.device_count())
    if args.device != device:
        problems.append(f"Trainer uses {args.device} but the rank pinned {device}")
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", device))
    return f"{os.uname().nodename}:{uuid}", problems


# DeepSpeed on CPU ranks without the JIT build of an op training never calls.
#
# Why: ``deepspeed.init_distributed`` on a CPU accelerator builds its shared-memory collective op
# (``deepspeed_shm_comm``, C++ compiled with ninja into ~/.cache/torch_extensions) on first use.
# DeepSpeed 0.19 calls it only from ``inference_all_reduce`` (deepspeed/comm/torch.py), which falls
# back to the process group's all_reduce without it; ZeRO training never calls it. The build took
# 128 s of a CI run on this project's 2-core machine (2026-11-27, 16:01:54 to 16:04:02, under load)
# and about a minute alone: a CPU run's first start (a newcomer's, every fresh CI clone) paid it.
# DeepSpeed has no switch for it, so the op is marked incompatible in DeepSpeed's own table of
# compatible ops before the process group starts; an unknown DeepSpeed layout leaves it alone.
SHM_OP = "deepspeed_shm_comm"


def skip_inference_op() -> bool:
    """Mark the shared-memory op incompatible so ``build_shm_op`` returns None; True if done."""
    try:
        import deepspeed.ops  # here: the module imports without the training stack
    except ImportError:
        return False
    table = getattr(deepspeed.ops, "__compatible_ops__", None)  # probed once, then cached
    if not isinstance(table, dict) or SHM_OP not in table:
        return False
    table[SHM_OP] = False
    return True
