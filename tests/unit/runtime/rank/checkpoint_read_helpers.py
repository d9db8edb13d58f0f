"""Helpers of the checkpoint read tests (moved out of test_checkpoint_read.py)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

BIG = 1 << 20  # float32 elements: 4 MiB, above SMALL_BYTES


def _saved(path: Path, legacy: bool = False) -> dict[str, Any]:
    state = {"module": OrderedDict(w=torch.arange(BIG, dtype=torch.float32), b=torch.ones(3)),
             "optimizer": {"state": {0: {"step": torch.tensor(7.0),
                                         "exp_avg": torch.full((BIG,), 0.5)}},
                           "groups": [(torch.zeros(2), 1e-5)]},
             "global_steps": 7}
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return state


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
