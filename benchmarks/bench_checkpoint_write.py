"""Writing a checkpoint: torch.save with its CRC-32 of every record against without
(``runtime/rank/checkpoints/save_speed.py``), side by side in one run, in alternating order.

    python benchmarks/bench_checkpoint_write.py --gib 4 [--device cuda] [--rounds 2] \
        [--dir DIR] [--sync] \
        [--variants with_crc32,without_crc32,host_first,pinned_first,torch_pinned] \
        [--out FILE.json]

One file shaped like a ZeRO optimizer partition (fp32 master weights, Adam's m and v; what
DeepSpeed's ``TorchCheckpointEngine`` writes per rank) of about ``--gib`` GiB, held on
``--device`` (torch.save copies a CUDA tensor to the host as it writes it, as DeepSpeed's save
does), written with and without CRC-32s into ``--dir`` (default: a folder under /tmp, removed
at the end). ``--sync`` adds an ``fsync`` of each file to its time: what the disk, not the page
cache, takes. Each file is read back mapped and compared with what was written. Prints each
write's seconds and GiB/s, and each variant's mean over ``with_crc32``'s.

Variants (``--variants``, default the first two), in rotating order from round to round:
``with_crc32`` (torch's default), ``without_crc32`` (the runtime's), and two that copy every
tensor to the host before a save without CRC-32s, their copy timed with the save:
``host_first`` (``.cpu()`` of each tensor, pageable memory) and ``pinned_first`` (one pinned
buffer per tensor, ``non_blocking`` copies, one synchronize). On CUDA they show how much of a
save is torch.save's own copy of each storage to the host, one at a time. ``torch_pinned``:
torch.save's own pinned copy (``use_pinned_memory_for_d2h``, the runtime's
``pinned_save.py``), its blocks released after each save as the runtime does, so
every save pays for pinning its memory anew.
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

from hpc_grpo.runtime.rank.checkpoints import pinned_save, save_speed  # noqa: E402


def _partition(gib: float, device: str) -> dict[str, Any]:
    import torch

    n = int(gib * 2**30 / 4 / 3)
    gen = torch.Generator().manual_seed(0)
    return {"optimizer_state_dict": {"state": {0: {
        "step": torch.tensor(3.0),
        "exp_avg": torch.randn(n, generator=gen).to(device),
        "exp_avg_sq": torch.rand(n, generator=gen).to(device)}}},
        "single_partition_of_fp32_groups": [torch.randn(n, generator=gen).to(device)]}


VARIANTS = ("with_crc32", "without_crc32", "host_first", "pinned_first", "torch_pinned")


def _on_host(value: Any, pinned: bool) -> Any:
    import torch

    if isinstance(value, dict):
        return {k: _on_host(v, pinned) for k, v in value.items()}
    if isinstance(value, list):
        return [_on_host(v, pinned) for v in value]
    if not isinstance(value, torch.Tensor) or value.device.type == "cpu":
        return value
    if not pinned:
        return value.cpu()
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value, non_blocking=True)
    return host


def _write(state: dict[str, Any], path: Path, variant: str, sync: bool) -> float:
    import torch

    save_speed.configure({save_speed.ENV: "1" if variant == "with_crc32" else "0"})
    pinned_save.set_pinned(variant == "torch_pinned")
    began = time.perf_counter()
    if variant in ("host_first", "pinned_first"):
        state = _on_host(state, pinned=variant == "pinned_first")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    torch.save(state, path)
    if sync:
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    seconds = time.perf_counter() - began
    pinned_save.release()  # as the runtime does after each save, outside the timing
    return seconds


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
    parser.add_argument("--variants", default="with_crc32,without_crc32")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args(argv)
    variants = opts.variants.split(",")
    if "with_crc32" not in variants or not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: some of {', '.join(VARIANTS)}, with_crc32 among them")
    folder = Path(tempfile.mkdtemp(prefix="bench-ckpt-write-", dir=opts.dir))
    state = _partition(opts.gib, opts.device)
    size_gib = 0.0
    times: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for rnd in range(opts.rounds):
            shift = rnd % len(variants)
            for name in variants[shift:] + variants[:shift]:
                path = folder / f"{name}.pt"
                seconds = _write(state, path, name, sync=opts.sync)
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
        save_speed.configure({save_speed.ENV: "1"})  # torch's defaults again
        pinned_save.set_pinned(False)
    over = {name: mean(times[name]) / mean(times["with_crc32"]) for name in variants}
    print(f"file {size_gib:.2f} GiB on {opts.device}, sync {opts.sync}; mean over with_crc32's: "
          + ", ".join(f"{name} {ratio:.3f}" for name, ratio in over.items()))
    if opts.out:
        saved: dict[str, Any] = {"gib": size_gib, "device": opts.device, "sync": opts.sync,
                                 "seconds": times, "over_with_crc32": over}
        if "without_crc32" in over:
            saved["ratio_without_over_with"] = over["without_crc32"]
        opts.out.write_text(json.dumps(saved, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
