"""Checkpoints copied from the GPU to the host through pinned memory, where the node has room.

Why: ``torch.save`` copies each CUDA storage to the host as it writes it, with ``storage.cpu()``
(a pageable copy) unless torch's own ``use_pinned_memory_for_d2h`` is set; then through a
page-locked block of the caching host allocator. A ZeRO checkpoint is mostly such storages
(each rank's fp32 master partition, Adam's m and v; ZeRO-1/2's flat bf16 weights), and the
stop's save is on the path from the signal to the next attempt's first step. Measured on the
lent 2 x H200 host (2026-11-28, ``benchmarks/bench_checkpoint_write.py --gib 8 --device cuda``,
docs/benchmarks.md session 45): an 8 GiB partition written in 2.08-2.16 s pinned against
7.11-7.46 s pageable.

What it costs, from torch's source (``serialization._save``, ``CachingHostAllocator``): the
allocator rounds every request up to a power of two, and ``_save`` asks for the next storage's
block while it still holds the last one's. So a rank holds up to two blocks of the largest
storage rounded up, page-locked (the pageable copy holds one storage, unrounded). At 7B ZeRO-2
on two GPUs that is 2 x 16 GiB a rank. The plan does not count it; instead each save checks that
the node's ranks' blocks fit in half of the memory it has available (MemAvailable, lowered to
the job's cgroup room: ``prefetch.cacheable_bytes``) and copies pageable otherwise,
saying so once in the rank log. The blocks are given back after every save.

``HPC_GRPO_CHECKPOINT_PINNED=0`` turns pinned copies off. Nothing changes without a CUDA device
or on a torch without the setting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hpc_grpo.rundir.contract import CHECKPOINT_HOST_FRACTION
from hpc_grpo.runtime.rank.checkpoints.prefetch import cacheable_bytes
from hpc_grpo.runtime.rank.context import HookContext

ENV = "HPC_GRPO_CHECKPOINT_PINNED"
HOST_FRACTION = CHECKPOINT_HOST_FRACTION  # of the node's available memory, for all its ranks' pinned blocks
_OPTIMIZER_TENSOR_LISTS = (  # DeepSpeed's saved partitions: ZeRO-1/2, ZeRO-3, bf16 ZeRO-1
    "single_partition_of_fp32_groups", "fp32_partitioned_groups_flat", "fp32_groups_flat_partition")


def block_bytes(largest: int) -> int:
    """Page-locked bytes a rank holds while torch.save copies storages of at most ``largest``
    bytes: two blocks, each rounded up to a power of two."""
    return 0 if largest <= 0 else 2 * (1 << (largest - 1).bit_length())


def fits(largest: int, ranks_on_node: int, available: int) -> bool:
    """The node's ranks' pinned blocks within HOST_FRACTION of its available memory."""
    return max(ranks_on_node, 1) * block_bytes(largest) <= HOST_FRACTION * available


def _tensors(obj: Any, seen: set[int], depth: int = 0) -> Iterator[Any]:
    """Tensors an optimizer (and the optimizers it wraps: accelerate's, DeepSpeed's, torch's)
    saves: its state's values and DeepSpeed's flat partitions."""
    if obj is None or id(obj) in seen or depth > 4:
        return
    seen.add(id(obj))
    for name in _OPTIMIZER_TENSOR_LISTS:
        yield from getattr(obj, name, None) or ()
    state = getattr(obj, "state", None)
    if isinstance(state, Mapping):
        for per_param in state.values():
            if isinstance(per_param, Mapping):
                yield from per_param.values()
    yield from _tensors(getattr(obj, "optimizer", None), seen, depth + 1)


def largest_device_storage(trainer: Any, on_device: Callable[[Any], bool] | None = None) -> int:
    """Bytes of the largest device storage a checkpoint of ``trainer`` writes with torch.save:
    the optimizers' tensors and the model's parameters and buffers (a view saves its whole
    storage: ZeRO-1/2's parameters are views into one flat buffer)."""
    import torch  # here: the module imports without torch

    device = on_device or (lambda t: t.is_cuda)
    seen: set[int] = set()
    found = list(_tensors(getattr(trainer, "optimizer", None), seen))
    found += list(_tensors(getattr(getattr(trainer, "model_wrapped", None), "optimizer", None), seen))
    model = getattr(trainer, "model", None)
    if model is not None:
        found += [*model.parameters(), *model.buffers()]
    return max((t.untyped_storage().nbytes() for t in found
                if isinstance(t, torch.Tensor) and device(t)), default=0)


def set_pinned(on: bool) -> bool:
    """torch.save's pinned copy on or off; False (and nothing set) on a torch without it."""
    try:
        from torch.utils.serialization import config  # here: the module imports without torch
    except ImportError:
        return False
    if not hasattr(config.save, "use_pinned_memory_for_d2h"):
        return False
    config.save.use_pinned_memory_for_d2h = on
    return True


def release() -> None:
    """Give the caching host allocator's page-locked blocks back (after a save's copies)."""
    import torch  # here: the module imports without torch

    if not torch.cuda.is_available():
        return  # no device: nothing was pinned
    empty = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    empty = empty or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``pin_saves`` with this node's ranks; its line where saves change."""
    line = pin_saves(trainer, ctx.env, ctx.run.procs_per_node)
    return [line] if line else []


def pin_saves(trainer: Any, env: Mapping[str, str], ranks_on_node: int,
              available: Callable[[], int] | None = None) -> str | None:
    """Wrap ``trainer._save_checkpoint``: each save pinned where it fits, its blocks released
    after it (also when it raises). Returns the rank log's line, None where nothing changes."""
    import torch  # here: the module imports without torch

    if env.get(ENV, "1") == "0" or not torch.cuda.is_available() or not set_pinned(False):
        return None
    if available is None:

        available = cacheable_bytes
    original, said = trainer._save_checkpoint, list[bool]()

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        largest, room = largest_device_storage(trainer), available()
        pinned = fits(largest, ranks_on_node, room)
        set_pinned(pinned)
        if not pinned and not said:
            said.append(True)
            print(f"[train] checkpoint copied through pageable memory: {ranks_on_node} rank(s) x "
                  f"{block_bytes(largest) / 2**30:.1f} GiB of pinned blocks would pass half of "
                  f"the node's {room / 2**30:.1f} GiB available", flush=True)
        try:
            return original(*args, **kwargs)
        finally:
            set_pinned(False)
            release()

    trainer._save_checkpoint = save_checkpoint
    return (f"GPU tensors reach the host through pinned memory where {ranks_on_node} rank(s)' "
            f"blocks fit in half of the node's available memory, released after each save "
            f"({ENV}=0 copies them through pageable memory)")
