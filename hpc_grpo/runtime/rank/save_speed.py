"""Checkpoints written without torch.save's CRC-32 of every record.

Why: a stopped job's save is on the path from the signal to the next attempt's first step, and
most of a ZeRO checkpoint is ``torch.save`` files (each rank's optimizer partition: fp32 master
weights and Adam's m and v, 12 B per parameter; ``optimizer.pt`` without DeepSpeed). torch.save
writes a zip archive and by default computes a CRC-32 of each record on one core while it
writes. Measured on this project's 2-core machine (``benchmarks/bench_checkpoint_write.py``),
a 2 GiB tensor to memory: 0.32-0.42 GiB/s with the CRC against 2.1-2.8 GiB/s without.

Why it loses nothing: the CRC is never read back on the resume path. ``torch.load`` maps the
records (``checkpoint_read.py``) or reads them through PyTorch's own zip reader, and neither
compares a record with its CRC; both load a file without it to the same bytes (tests in
``tests/unit/runtime/rank/test_save_speed.py``). What tells a complete save from a partial one
is the completion marker (``checkpoints.py``), written after every rank's save, not the CRC.
Tools that check a zip archive's CRCs (``unzip -t``, Python's ``ZipFile.testzip``) will report
the records as damaged: ``HPC_GRPO_CHECKPOINT_CRC32=1`` writes them again.

Pinned copies to the host (on by default; ``HPC_GRPO_CHECKPOINT_PINNED=0`` turns them off):
torch.save's own ``use_pinned_memory_for_d2h``. Without it, each CUDA storage reaches the host
through ``storage.cpu()``, a pageable copy. With it, through page-locked memory from torch's
caching host allocator, one storage at a time; a ZeRO partition's same-sized tensors (master
weights, m, v) reuse one block. Measured on the lent 2 x H200 host (2026-11-28,
``benchmarks/bench_checkpoint_write.py --gib 8 --device cuda``, docs/benchmarks.md session 45):
an 8 GiB partition written in 2.08-2.16 s against 7.11-7.46 s. The allocator keeps those blocks
(host memory the plan does not count), so ``install`` gives them back after every save.
"""

from __future__ import annotations

from collections.abc import Mapping

ENV = "HPC_GRPO_CHECKPOINT_CRC32"
PINNED_ENV = "HPC_GRPO_CHECKPOINT_PINNED"


def configure(env: Mapping[str, str]) -> str:
    """Set torch.save's CRC-32 for this process from ``env``; returns the line for the rank log."""
    import torch

    write_crc = env.get(ENV, "0") == "1"
    set_crc = getattr(torch.serialization, "set_crc32_options", None)
    if set_crc is None:  # a torch before 2.6: it always writes them
        return f"torch {torch.__version__} writes a CRC-32 of every checkpoint record"
    set_crc(write_crc)
    line = (f"checkpoints carry a CRC-32 of every record ({ENV}=1)" if write_crc else
            f"checkpoints are written without a CRC-32 of every record ({ENV}=1 writes them)")
    if pinned_copies(env):
        line += ("; GPU tensors reach the host through pinned memory, released after each save "
                 f"({PINNED_ENV}=0 copies them through pageable memory)")
    return line


def pinned_copies(env: Mapping[str, str]) -> bool:
    """Set torch.save's pinned device-to-host copy from ``env``; whether it is on (never without
    a CUDA device, where nothing is copied from one, nor on a torch without the setting)."""
    import torch

    try:
        from torch.utils.serialization import config
    except ImportError:
        return False
    if not hasattr(config.save, "use_pinned_memory_for_d2h"):
        return False
    on = env.get(PINNED_ENV, "1") != "0" and torch.cuda.is_available()
    config.save.use_pinned_memory_for_d2h = on
    return on


def release_pinned() -> None:
    """Give the caching host allocator's page-locked blocks back (after a save's copies)."""
    import torch

    if not torch.cuda.is_available():
        return  # no device: nothing was pinned
    empty = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    if empty is not None:
        empty()
    elif hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()


def install(trainer: object, env: Mapping[str, str]) -> None:
    """With pinned copies on (the default): release the pinned blocks after each checkpoint."""
    import torch

    if env.get(PINNED_ENV, "1") == "0" or not torch.cuda.is_available():
        return
    from transformers import TrainerCallback

    class ReleasePinned(TrainerCallback):  # type: ignore[misc]
        def on_save(self, args: object, state: object, control: object, **kwargs: object) -> None:
            release_pinned()

    trainer.add_callback(ReleasePinned())  # type: ignore[attr-defined]
