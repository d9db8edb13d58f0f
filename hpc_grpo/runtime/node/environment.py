"""The environment a node task gives torchrun and its ranks: visible GPUs, OpenMP threads,
compile and hub caches, scratch space. Stdlib-only, like the node task that imports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.node import bytecode, vllm_server
from hpc_grpo.runtime.node.scratch import scratch_env
from hpc_grpo.runtime.shared.vllm_address import server_mode


def trainer_visible_devices(run: RunRecord, env: Mapping[str, str]) -> str | None:
    """Server mode: hide the vLLM server's GPUs from the trainers, so LOCAL_RANK 0 never lands
    on a GPU the server uses ("Duplicate GPU detected"). A CPU plan: hide every GPU, so ranks
    planned for the CPU (a profile of 0 GPUs on a machine that has some) cannot pick a card up
    through torch's, accelerate's or vLLM's own device choice. None when nothing is hidden."""
    if run.device == "cpu":
        return ""
    if not server_mode(run) or run.vllm.server is None:
        return None
    trainer = list(run.vllm.server.trainer_gpus)
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        return ",".join(str(i) for i in trainer)
    if max(trainer, default=-1) >= len(visible):
        raise ValueError(f"trainer GPUs {trainer} but CUDA_VISIBLE_DEVICES={','.join(visible)}")
    return ",".join(visible[i] for i in trainer)


def host_compute(run: RunRecord) -> bool:
    """Whether the ranks compute on the CPU: CPU training, or DeepSpeed's CPU Adam when the
    optimizer is offloaded. Only then do OpenMP threads beyond one earn their cores."""
    offload = run.deepspeed is not None and run.deepspeed.offload_optimizer
    return run.device != "cuda" or offload


def threads_per_rank(env: Mapping[str, str], usable_cpus: int, procs_per_node: int,
                     computes_on_host: bool = True) -> int:
    """OpenMP threads for one rank. Host compute gets the node's CPUs split over its ranks: the
    fewer of Slurm's count and the CPUs this task may run on (a cgroup or a shared login machine
    may allow fewer), at least one. A GPU rank's host work is one Python thread launching
    kernels (vLLM's decode loop included), and idle OpenMP workers spinning between parallel
    regions take cores from it: one thread, as torchrun and accelerate give multi-GPU ranks."""
    if not computes_on_host:
        return 1
    cpus = usable_cpus
    if env.get("SLURM_CPUS_ON_NODE", "").isdigit():
        cpus = min(cpus, int(env["SLURM_CPUS_ON_NODE"]))
    return max(1, cpus // max(1, procs_per_node))


def child_env(env: Mapping[str, str], attempt: str, run: RunRecord, cpus: int = 1,
              libraries: Mapping[str, str] | None = None) -> dict[str, str]:
    """torchrun's environment: OpenMP threads per rank as threads_per_rank says (torchrun alone
    would give each rank one thread, or all of them with one rank), this package importable.
    ``libraries``: ``library_env``'s answer where the caller has it already (a node that also
    starts `vllm serve` gives both the same one; its bytecode key reads every installed
    distribution's RECORD, 0.1-0.2 s)."""
    out = dict(env)
    devices = trainer_visible_devices(run, env)
    if devices is not None:
        out["CUDA_VISIBLE_DEVICES"] = devices
    threads = threads_per_rank(env, cpus, run.procs_per_node, host_compute(run))
    out.setdefault("OMP_NUM_THREADS", str(threads))
    out.setdefault("PYTHONUNBUFFERED", "1")
    out.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGINT,SIGHUP,SIGQUIT")
    out["HPC_GRPO_ATTEMPT"] = attempt
    out.update(library_env(env, attempt, run) if libraries is None else libraries)
    out.update(vllm_server.trainer_host_env(run, env))
    root = str(Path(__file__).resolve().parents[3])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return out


def library_env(env: Mapping[str, str], attempt: str, run: RunRecord) -> dict[str, str]:
    """Where the libraries of the ranks and of a `vllm serve` write: the bytecode cache, the hub
    cache run.json asks for, and rundir/workspace.py's rule with the attempt's scratch
    (scratch.py): compile caches shared by the runs of one output root (a requeue and the next
    run of a model start warm, about 50 s less for a 0.5B model; a cache the user set is kept).
    Nothing under ~/.cache or /tmp (issue #27), and a server requeued onto another node starts
    as warm as the ranks do."""
    out: dict[str, str] = {}
    if run.run_dir:
        out.update(bytecode.ranks_env(Path(run.run_dir).parent, env))
    out.update(hub_env(run))
    out.update(scratch_env(run, attempt, env))
    return out


def hub_env(run: RunRecord) -> dict[str, str]:
    """The shared Hugging Face cache and offline mode run.json asks for (`hpc-grpo stage`): set,
    not defaulted, since the ranks must read the cache the launcher checked; HF_HUB_CACHE too,
    so that a site's own HF_HUB_CACHE cannot point them elsewhere."""
    load = run.model_load
    env: dict[str, str] = {}
    if load.hf_home:
        env.update(HF_HOME=load.hf_home, HF_HUB_CACHE=str(Path(load.hf_home) / "hub"))
    if load.offline:  # no hub requests at all: no timeouts, no silent download of another commit
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env
