"""A rank's library imports with the cyclic collector paused (runtime/rank/setup/startup_heap.py,
``collector_paused``) against the same imports with it running (``HPC_GRPO_STARTUP_HEAP=0``),
in alternating rounds of fresh interpreters, in one run. Prints each round, the means and their
ratio.

Why: every rank of every attempt imports torch, TRL (transformers, accelerate, datasets, peft)
and, where used, DeepSpeed and vLLM; on CPU test jobs that is most of a rank's start. The
imports are grouped as the rank groups them (rank/setup/process_group.py, rank/train.py).

Run: ``python benchmarks/bench_rank_imports.py [--rounds 3] [--deepspeed] [--vllm]``
(``--vllm`` on a GPU machine with vLLM installed: TRL's trainer then imports it).

The interpreters get the ranks' bytecode environment (runtime/node/bytecode.py ``ranks_env``,
under ``--output-root``, default a temporary folder; the first, untimed import fills it), as a
node task gives it: where the packages were installed without bytecode and
``PYTHONDONTWRITEBYTECODE`` is set (the lent GPU machines), an interpreter without it compiles
every module from source at every import, likely what session 48's run without it measured
(20 s a round where the ranks logged 8-10 s; not measured apart). ``--as-installed`` leaves the
environment as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpc_grpo.runtime.node.bytecode import ranks_env

RANK_IMPORTS = """
import os, sys, time
began = time.perf_counter()
from hpc_grpo.runtime.rank.setup import startup_heap
with startup_heap.collector_paused(os.environ):
    import torch
    import torch.distributed
if "deepspeed" in sys.argv:
    with startup_heap.collector_paused(os.environ):
        import deepspeed
with startup_heap.collector_paused(os.environ):
    from trl import GRPOConfig
with startup_heap.collector_paused(os.environ):
    from trl import GRPOTrainer
    from trl.extras import profiling
if "vllm" in sys.argv:
    import vllm  # imported already by TRL's trainer where installed: a check, not a cost
print(round(time.perf_counter() - began, 3))
"""


def timed(paused: bool, extra: list[str], base: dict[str, str]) -> float:
    env = dict(base, HPC_GRPO_STARTUP_HEAP="1" if paused else "0")
    out = subprocess.run([sys.executable, "-c", RANK_IMPORTS, *extra], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deepspeed", action="store_true")
    parser.add_argument("--vllm", action="store_true")
    parser.add_argument("--output-root", type=Path, default=None,
                        help="where the ranks' bytecode cache goes (default: a temporary folder)")
    parser.add_argument("--as-installed", action="store_true",
                        help="no bytecode cache: the environment as it is")
    args = parser.parse_args()
    extra = [name for name in ("deepspeed", "vllm") if getattr(args, name)]
    with tempfile.TemporaryDirectory(prefix="bench-imports-") as scratch:
        root = args.output_root or Path(scratch)
        added = {} if args.as_installed else ranks_env(root, os.environ)
        base = {**os.environ, **added}
        shown = added or ("as installed (--as-installed)" if args.as_installed else
                          "as installed (ranks_env adds nothing here: see bytecode.py)")
        print(f"bytecode: {shown}", flush=True)
        result = _rounds(args.rounds, extra, base)
    result["bytecode_env"] = added
    result["as_installed"] = bool(args.as_installed)
    print(json.dumps(result))


def _rounds(rounds: int, extra: list[str], base: dict[str, str]) -> dict[str, object]:
    timed(True, extra, base)  # a first import fills the page cache (and bytecode cache) for both
    running: list[float] = []
    paused: list[float] = []
    for round_ in range(1, rounds + 1):
        order = (False, True) if round_ % 2 else (True, False)
        for is_paused in order:
            (paused if is_paused else running).append(timed(is_paused, extra, base))
        print(f"round {round_}: collector running {running[-1]:.2f} s, paused {paused[-1]:.2f} s",
              flush=True)
    return {"imports": ["torch", *extra, "trl GRPOConfig", "trl GRPOTrainer"],
            "running_s": running, "paused_s": paused,
            "running_mean_s": round(statistics.mean(running), 3),
            "paused_mean_s": round(statistics.mean(paused), 3),
            "paused_over_running": round(statistics.mean(paused) / statistics.mean(running), 3)}


if __name__ == "__main__":
    main()
