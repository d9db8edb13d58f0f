"""Checkpoints written without torch.save's CRC-32 of every record.

Why: a stopped job's save is on the path from the signal to the next attempt's first step, and
most of a ZeRO checkpoint is ``torch.save`` files (each rank's optimizer partition: fp32 master
weights and Adam's m and v, 12 B per parameter; ``optimizer.pt`` without DeepSpeed). torch.save
writes a zip archive and by default computes a CRC-32 of each record on one core while it
writes. Measured on this project's 2-core machine (``benchmarks/bench_checkpoint_write.py``),
a 2 GiB tensor to memory: 0.32-0.42 GiB/s with the CRC against 2.1-2.8 GiB/s without.

Why it loses nothing: the CRC is never read back on the resume path. ``torch.load`` maps the
records (``read.py``) or reads them through PyTorch's own zip reader, and neither
compares a record with its CRC; both load a file without it to the same bytes (tests in
``tests/unit/runtime/rank/test_save_speed.py``). What tells a complete save from a partial one
is the completion marker (``folders.py``), written after every rank's save, not the CRC.
Tools that check a zip archive's CRCs (``unzip -t``, Python's ``ZipFile.testzip``) will report
the records as damaged: ``HPC_GRPO_CHECKPOINT_CRC32=1`` writes them again.

Pinned device-to-host copies, the other half of a save's speed: ``pinned_save.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpc_grpo.runtime.rank.context import HookContext

ENV = "HPC_GRPO_CHECKPOINT_CRC32"


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``configure`` for this process (the trainer is not touched); its line."""
    return [configure(ctx.env)]


def configure(env: Mapping[str, str]) -> str:
    """Set torch.save's CRC-32 for this process from ``env``; returns the line for the rank log."""
    import torch  # here: the module imports without torch

    write_crc = env.get(ENV, "0") == "1"
    set_crc = getattr(torch.serialization, "set_crc32_options", None)
    if set_crc is None:  # a torch before 2.6: it always writes them
        return f"torch {torch.__version__} writes a CRC-32 of every checkpoint record"
    set_crc(write_crc)
    if write_crc:
        return f"checkpoints carry a CRC-32 of every record ({ENV}=1)"
    return f"checkpoints are written without a CRC-32 of every record ({ENV}=1 writes them)"
