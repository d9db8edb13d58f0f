"""Writing a checkpoint: torch.save with its CRC-32 of every record against without
(``runtime/rank/save_speed.py``), side by side in one run, in alternating order.

    python benchmarks/bench_checkpoint_write.py --gib 4 [--device cuda] [--rounds 2] \
        [--dir DIR] [--sync] [--out FILE.json]

One file shaped like a ZeRO optimizer partition (fp32 master weights, Adam's m and v; what
DeepSpeed's ``TorchCheckpointEngine`` writes per rank) of about ``--gib`` GiB, held on
``--device`` (torch.save copies a CUDA tensor to the host as it writes it, as DeepSpeed's save
does), written with and without CRC-32s into ``--dir`` (default: a folder under /tmp, removed
at the end). ``--sync`` adds an ``fsync`` of each file to its time: what the disk, not the page
cache, takes. Each file is read back mapped and compared with what was written. Prints each
write's seconds and GiB/s, and the ratio of the means (without over with).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpc_grpo.runtime.rank import save_speed  # noqa: E402


def _partition(gib: float, device: str) -> dict[str, Any]:
    import torch

    n = int(gib * 2**30 / 4 / 3)
    gen = torch.Generator().manual_seed(0)
    return {"optimizer_state_dict": {"state": {0: {
        "step": torch.tensor(3.0),
        "exp_avg": torch.randn(n, generator=gen).to(device),
        "exp_avg_sq": torch.rand(n, generator=gen).to(device)}}},
        "single_partition_of_fp32_groups": [torch.randn(n, generator=gen).to(device)]}


def _write(state: dict[str, Any], path: Path, crc: bool, sync: bool) -> float:
    import torch

    save_speed.configure({save_speed.ENV: "1" if crc else "0"})
    began = time.perf_counter()
    torch.save(state, path)
    if sync:
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    return time.perf_counter() - began


def _same(state: dict[str, Any], path: Path) -> bool:
    import torch

    loaded = torch.load(path, mmap=True, weights_only=False, map_location="cpu")
    for key in ("exp_avg", "exp_avg_sq"):
        want = state["optimizer_state_dict"]["state"][0][key].cpu()
        if not torch.equal(loaded["optimizer_state_dict"]["state"][0][key], want):
            return False
    return bool(torch.equal(loaded["single_partition_of_fp32_groups"][0],
                            state["single_partition_of_fp32_groups"][0].cpu()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--sync", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-ckpt-write-", dir=opts.dir))
    state = _partition(opts.gib, opts.device)
    size_gib = 0.0
    times: dict[str, list[float]] = {"with_crc32": [], "without_crc32": []}
    try:
        for rnd in range(opts.rounds):
            order = ("with_crc32", "without_crc32") if rnd % 2 == 0 else ("without_crc32",
                                                                           "with_crc32")
            for name in order:
                path = folder / f"{name}.pt"
                seconds = _write(state, path, crc=name == "with_crc32", sync=opts.sync)
                size_gib = path.stat().st_size / 2**30
                if not _same(state, path):
                    print(f"{name}: read back differs", file=sys.stderr)
                    return 1
                times[name].append(seconds)
                print(f"round {rnd + 1} {name}: {seconds:.3f} s, {size_gib / seconds:.2f} GiB/s",
                      flush=True)
                path.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        save_speed.configure({})
    ratio = mean(times["without_crc32"]) / mean(times["with_crc32"])
    print(f"file {size_gib:.2f} GiB on {opts.device}, sync {opts.sync}: without over with "
          f"CRC-32 {ratio:.3f} of the time")
    if opts.out:
        opts.out.write_text(json.dumps({"gib": size_gib, "device": opts.device, "sync": opts.sync,
                                        "seconds": times, "ratio_without_over_with": ratio},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
