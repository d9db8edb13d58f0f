"""The smallest change that makes an impossible request fit, found by trying changes one at a time.

Only the search is reused, so a hint never promises a layout the planner would not pick.
"""

from __future__ import annotations

from dataclasses import replace

from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.memory.search import fits

GPU_SIZES_GIB = (24, 40, 48, 80, 94, 141, 192)
MAX_NODES = 256


def _min_nodes(req: PlanRequest, start: int) -> int | None:
    """Fewest nodes >= start that fit (fitting only gets easier with more nodes past one)."""
    if start > MAX_NODES or not fits(replace(req, nodes=MAX_NODES)):
        return None
    low, high = start, MAX_NODES
    while low < high:
        mid = (low + high) // 2
        if fits(replace(req, nodes=mid)):
            high = mid
        else:
            low = mid + 1
    return low


def _batch_ok(req: PlanRequest, batch: int) -> bool:
    return batch * req.world_size * req.generation_steps % req.num_generations == 0


def single_changes(req: PlanRequest) -> list[str]:
    """Each change that alone makes req fit, at its smallest."""
    options = []
    nodes = _min_nodes(req, req.nodes + 1)
    if nodes is not None:
        options.append(f"at least {nodes} nodes")
    bigger = [size for size in GPU_SIZES_GIB if size > req.gpu_memory_gib]
    size = next((s for s in bigger if fits(replace(req, gpu_memory_gib=float(s)))), None)
    if size is not None:
        options.append(f"GPUs with {size} GiB")
    if req.gpus_per_node < 8 and fits(replace(req, gpus_per_node=8)):
        options.append("8 GPUs per node")
    if not req.lora and fits(replace(req, lora=True)):
        options.append("LoRA (use_peft)")
    if req.lora and fits(replace(req, lora=False)):
        options.append("full fine-tuning instead of LoRA (ZeRO-3 then shards the weights)")
    batch = next((b for b in range(req.per_device_train_batch_size - 1, 0, -1)
                  if _batch_ok(req, b) and fits(replace(req, per_device_train_batch_size=b))),
                 None)
    if batch is not None:
        options.append(f"per_device_train_batch_size={batch}")
    lengths = range((req.completion_length - 1) // 256 * 256, 0, -256)
    length = next((c for c in lengths if fits(replace(req, completion_length=c))), None)
    if length is not None:
        options.append(f"max_completion_length={length}")
    cpu = _min_cpu(req)
    if cpu is not None:
        options.append(f"{cpu} GiB of CPU memory per node")
    return options


def _min_cpu(req: PlanRequest) -> int | None:
    """Fewest GiB of CPU memory per node, in 64 GiB steps, that fit (None: CPU is not the limit)."""
    low, high = int(req.cpu_memory_gib_per_node // 64) + 1, 256
    if low > high or not fits(replace(req, cpu_memory_gib_per_node=float(high * 64))):
        return None
    while low < high:
        mid = (low + high) // 2
        if fits(replace(req, cpu_memory_gib_per_node=float(mid * 64))):
            high = mid
        else:
            low = mid + 1
    return low * 64


def combined_change(req: PlanRequest) -> str:
    """The fewest GPU-GiB of nodes (more of them, bigger GPUs, 8 per node) that fit."""
    best: tuple[float, str] | None = None
    sizes = [s for s in GPU_SIZES_GIB if s >= req.gpu_memory_gib] or [int(req.gpu_memory_gib)]
    for per_node in sorted({req.gpus_per_node, max(req.gpus_per_node, 8)}):
        for size in sizes:
            candidate = replace(req, gpus_per_node=per_node, gpu_memory_gib=float(size))
            nodes = _min_nodes(candidate, 1)
            if nodes is None:
                continue
            cost = float(nodes * per_node * size)
            if best is None or cost < best[0]:
                best = (cost, f"{nodes} nodes of {per_node} × {size} GiB GPUs")
    return best[1] if best else ""


def smallest_change(req: PlanRequest) -> str:
    options = single_changes(req)
    if options:
        return "it fits with " + ", or ".join(options)
    combined = combined_change(req)
    if combined:
        return f"no single change fits; the smallest cluster that does: {combined}"
    return (f"nothing up to {MAX_NODES} nodes of 8 × {GPU_SIZES_GIB[-1]} GiB GPUs fits: "
            "use a smaller model")
