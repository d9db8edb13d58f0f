"""The highest training step a run's own W&B files hold, read on the ranks before resuming.

W&B writes every record of a run, online or offline, to a local transaction log
(``RUN_DIR/wandb/{offline-run,run}-<time>-<id>/run-<id>.wandb``: a LevelDB-style log of
protobuf records, 32 KiB blocks of [crc32 4][length 2][type 1][data]). A node killed mid-step
loses the records W&B's service had not written yet, so what the ranks logged (metrics.jsonl)
is not what W&B has; this file is. A torn last record ends the scan, it never raises.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7  # file header ":W&B" + magic (2) + version (1); each record header is 7 bytes too
STEP_KEY = "train/global_step"  # transformers' W&B x-axis


def records(path: Path) -> Iterator[bytes]:
    """The complete records of one .wandb file (FULL, or FIRST..LAST pieces joined)."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        return
    pos, pieces = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + HEADER + length > len(data):
            return  # torn by a kill
        pieces += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (1, 4):
            yield pieces
            pieces = b""


def _steps(path: Path, run_id: str, pb: Any) -> Iterator[int]:
    for raw in records(path):
        record = pb.Record()
        try:
            record.ParseFromString(raw)
        except Exception:  # a damaged record: what came before it still counts
            return
        if record.WhichOneof("record_type") != "history":
            continue
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            if key == STEP_KEY:
                yield int(json.loads(item.value_json))


def highest_step(run_dir: Path, run_id: str) -> int | None:
    """The highest train/global_step in this run's W&B files; None when there are none or
    W&B's record format cannot be read here (wandb not installed)."""
    files = sorted((run_dir / "wandb").glob(f"*run-*-{run_id}/run-{run_id}.wandb"))
    if not files:
        return None
    try:
        from wandb.proto import wandb_internal_pb2 as pb  # here: kept out of the module's import
    except Exception:
        return None
    return max((step for path in files for step in _steps(path, run_id, pb)), default=0)
