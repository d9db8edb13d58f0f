"""Reading a checkpoint back: DeepSpeed's whole-file ``torch.load`` against the mapped read of
``runtime/rank/checkpoints/read.py``, side by side in one run, in alternating order.

    python benchmarks/bench_checkpoint_read.py micro --gib 8 [--device cuda] [--rounds 2] [--cold]
    python benchmarks/bench_checkpoint_read.py prefetch --gib 4 --wait 8 [--device cuda] [--rounds 2]
    python benchmarks/bench_checkpoint_read.py resume --shape qwen2-1.5b --out DIR \
        [--order whole,mapped,whole,mapped]

``micro``: one file shaped like a ZeRO optimizer partition (fp32 master weights, Adam's m and v)
of about ``--gib`` GiB, read back both ways, each tensor then copied into a tensor allocated
beforehand on ``--device`` (what the optimizer does with it); the file is in the page cache for
every read (read once before the first), or with ``--cold`` dropped from it before every read
(``posix_fadvise(DONTNEED)``: a node that did not write the checkpoint). Prints each read's
seconds and the ratio.

``prefetch``: the same file, dropped from the page cache before every read, read mapped after
``--wait`` seconds (the trainer's build, stood in for) without and with the prefetch thread of
``runtime/rank/checkpoints/prefetch.py`` started when the wait began, in alternating order.

``resume`` (a GPU machine, two GPUs): one run through ``hpc-grpo submit`` trains 2 steps and
saves checkpoint-2; then the node task resumes it once per entry of ``--order``
(``HPC_GRPO_CHECKPOINT_MMAP`` 0 for whole, 1 for mapped), is sent SIGUSR2 once its first new
step is logged (the rank saves the next step and stops: each resume reads a checkpoint of the
same size), and rank 0's start-up record gives the time from the trainer built to train begin
(DeepSpeed's wrapping plus the read). Each part writes ``DIR/bench-checkpoint-read-PART.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_gpu import gpu_info, sh, site_file  # noqa: E402
from hpc_grpo import rundir  # noqa: E402
from hpc_grpo.rundir import contract  # noqa: E402
from hpc_grpo.runtime.rank.checkpoints.read import ENV, MappedReads, mapped_load  # noqa: E402

SETS = {"max_steps": 2, "save_steps": 2, "save_total_limit": 1, "learning_rate": 1e-5,
        "per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 64}


def _partition(path: Path, gib: float) -> None:
    import torch

    n = int(gib * 2**30 / 4 / 3)
    state = {"optimizer_state_dict": {"state": {0: {"step": torch.tensor(3.0),
                                                    "exp_avg": torch.randn(n),
                                                    "exp_avg_sq": torch.rand(n)}}},
             "single_partition_of_fp32_groups": [torch.randn(n)]}
    torch.save(state, path)


def _tensors(loaded: dict[str, Any]) -> list[Any]:
    adam = loaded["optimizer_state_dict"]["state"][0]
    return [adam["exp_avg"], adam["exp_avg_sq"], *loaded["single_partition_of_fp32_groups"]]


def _read(path: Path, how: str, dest: list[Any]) -> float:
    import torch

    started = time.perf_counter()
    if how == "mapped":
        loaded = mapped_load(MappedReads())(None, str(path), map_location="cpu")
    else:  # DeepSpeed's TorchCheckpointEngine.load
        loaded = torch.load(path, map_location="cpu", weights_only=False)
    for target, source in zip(dest, _tensors(loaded), strict=True):
        target.copy_(source)
    if dest[0].is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _drop_from_page_cache(path: Path) -> None:
    os.sync()  # dirty pages are not dropped
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _file_and_targets(gib: float, device: str, folder: Path) -> tuple[Path, list[Any]]:
    """The partition file written, and a tensor on ``device`` for each of its large ones (what
    the optimizer copies them into)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "partition.pt"
    _partition(path, gib)
    first = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return path, [torch.empty_like(t, device=device) for t in _tensors(first)]


def micro(gib: float, device: str, rounds: int, folder: Path, cold: bool = False) -> dict[str, Any]:
    path, dest = _file_and_targets(gib, device, folder)
    with open(path, "rb") as f:  # into the page cache, as right after the save
        while f.read(1 << 26):
            pass
    times: dict[str, list[float]] = {"whole": [], "mapped": []}
    for i in range(rounds):
        for how in (("whole", "mapped") if i % 2 == 0 else ("mapped", "whole")):
            if cold:
                _drop_from_page_cache(path)
            times[how].append(round(_read(path, how, dest), 3))
            print(f"round {i + 1} {how}: {times[how][-1]:.2f} s", flush=True)
    size = path.stat().st_size
    path.unlink()
    ratio = mean(times["whole"]) / mean(times["mapped"])
    where = f"{size / 2**30:.1f} GiB to {device}" + (" (cold page cache)" if cold else "")
    print(f"{where}: whole {mean(times['whole']):.2f} s, mapped {mean(times['mapped']):.2f} s: "
          f"the mapped read {ratio:.2f}x as fast", flush=True)
    return {"bytes": size, "device": device, "cold_page_cache": cold, "seconds": times,
            "whole_over_mapped": round(ratio, 3)}


def prefetch(gib: float, device: str, rounds: int, folder: Path, wait: float) -> dict[str, Any]:
    """The file dropped from the page cache before every read; ``wait`` seconds stand in for
    the trainer's build; then the mapped read, without and with runtime/rank/
    rank/checkpoints/prefetch.py's thread started when the wait began."""
    from hpc_grpo.runtime.rank.checkpoints.prefetch import Prefetch

    path, dest = _file_and_targets(gib, device, folder)
    size = path.stat().st_size
    times: dict[str, list[float]] = {"without": [], "with": []}
    lines = []
    for i in range(rounds):
        for how in (("without", "with") if i % 2 == 0 else ("with", "without")):
            _drop_from_page_cache(path)
            ahead = Prefetch([path], size, 0).start() if how == "with" else None
            time.sleep(wait)
            times[how].append(round(_read(path, "mapped", dest), 3))
            if ahead is not None:
                lines.append(ahead.stop())
            print(f"round {i + 1} {how} prefetch: read {times[how][-1]:.2f} s"
                  f"{'; ' + lines[-1] if ahead is not None else ''}", flush=True)
    path.unlink()
    ratio = mean(times["without"]) / mean(times["with"])
    print(f"{size / 2**30:.1f} GiB to {device}, cold page cache, {wait:.0f} s wait: the read "
          f"{mean(times['without']):.2f} s without, {mean(times['with']):.2f} s with the prefetch "
          f"({ratio:.2f}x)", flush=True)
    return {"bytes": size, "device": device, "wait_s": wait, "seconds": times,
            "prefetch_lines": lines, "without_over_with": round(ratio, 3)}


def _node_env(home: Path, how: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return env | {"HPC_GRPO_HOME": str(home), ENV: "1" if how == "mapped" else "0"}


def _resume(run_dir: Path, home: Path, how: str) -> dict[str, Any]:
    log = run_dir / "logs" / "rank-0.log"
    offset = log.stat().st_size if log.exists() else 0
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "hpc_grpo.runtime.node", str(run_dir)],
                            env=_node_env(home, how), stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    first_new = None
    while proc.poll() is None and time.time() - started < 400:
        new = [m for m in rundir.read_jsonl(run_dir / contract.METRICS_JSONL) if m["time"] > started]
        if new and first_new is None:
            first_new = new[0]["time"] - started
            proc.send_signal(signal.SIGUSR2)  # as Slurm's --signal B:USR2
        time.sleep(0.5)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    startup = rundir.read_jsonl(run_dir / contract.STARTUP_JSONL)[-1]
    lines = log.read_bytes()[offset:].decode(errors="replace").splitlines()
    return {"how": how, "first_new_step_s": round(first_new or -1, 1), "exit": proc.returncode,
            "startup": startup, "resumed_from_step": startup.get("resumed_from_step"),
            "phase": rundir.load_state(run_dir).phase,
            "checkpoint_lines": [x for x in lines if "[checkpoint]" in x]}


def resume(shape: str, out: Path, order: list[str]) -> dict[str, Any]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    home = out / "home"
    if torch.cuda.is_available():
        name, gpu_gib, gpus = gpu_info()
        site = site_file(out, gpus, gpu_gib)
    else:  # the flow alone, on this machine's CPUs (the whole read both times: not a GPU run)
        name, gpus, site = "cpu", 0, out / "cpu.yaml"
        site.write_text(f"scheduler: local\ngpus_per_node: 0\ncpus_per_node: 2\nprocs_per_node: 2\n"
                        f"max_time: '01:00:00'\noutput_root: {out / 'runs'}\n")
    sets = [f"--set={k}={v}" for k, v in SETS.items()]
    sh([sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
        f"builtin:{shape}", "--run-id", "base", "--wait", *sets],
       env={**os.environ, "HPC_GRPO_HOME": str(home)}, timeout=600)
    run_dir = out / "runs" / "base"
    record = json.loads((run_dir / "run.json").read_text())
    record["grpo_config"]["max_steps"] = 100  # room for every resume's two new steps
    (run_dir / "run.json").write_text(json.dumps(record, indent=1))
    runs = []
    for how in order:
        runs.append(_resume(run_dir, home, how))
        parts = runs[-1]["startup"]["parts_s"]
        print(f"{how}: first new step {runs[-1]['first_new_step_s']} s, trainer built to train "
              f"begin {parts['prepare_and_load']} s; {runs[-1]['checkpoint_lines']}", flush=True)
    load = {how: mean(r["startup"]["parts_s"]["prepare_and_load"] for r in runs if r["how"] == how)
            for how in set(order)}
    first = {how: mean(r["first_new_step_s"] for r in runs if r["how"] == how) for how in set(order)}
    print(f"trainer built to train begin: whole {load.get('whole')} s, mapped {load.get('mapped')} s; "
          f"first new step: whole {first.get('whole')} s, mapped {first.get('mapped')} s", flush=True)
    return {"gpu": name, "gpus": gpus, "shape": shape, "order": order, "runs": runs,
            "prepare_and_load_mean_s": load, "first_new_step_mean_s": first,
            "deepspeed": record.get("deepspeed")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("micro", "prefetch", "resume"))
    parser.add_argument("--wait", type=float, default=8.0, help="prefetch: the build's stand-in")
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="drop the file from the page cache first")
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--order", default="whole,mapped,whole,mapped")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-checkpoint-read"))
    args = parser.parse_args()
    if args.part == "micro":
        result = micro(args.gib, args.device, args.rounds, args.out, args.cold)
    elif args.part == "prefetch":
        result = prefetch(args.gib, args.device, args.rounds, args.out, args.wait)
    else:
        result = resume(args.shape, args.out, args.order.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"bench-checkpoint-read-{args.part}{'-cold' if args.cold else ''}.json"
    (args.out / name).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
