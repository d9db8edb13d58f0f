"""Colocate against server mode on the same two GPUs, through Slurm, 1.5B shape (issue #17).

  python benchmarks/bench_multinode.py --out DIR [--steps 10] [--rounds 1]

Runs on a machine with 2 GPUs as root (the lent 2 x H200), starting the sandbox Slurm cluster
itself, and submits every run with ``hpc-grpo submit --wait``:
  colocate: 2 nodes x 1 GPU (HPC_GRPO_SANDBOX_GPUS_PER_NODE=1), the default plan, one rank and
            its embedded vLLM engine per node, NCCL between the nodes over sockets;
  server:   1 node x 2 GPUs (HPC_GRPO_SANDBOX_GPUS_PER_NODE=2), ``--vllm-mode server``: GPU 0
            runs ``vllm serve``, GPU 1 trains the whole batch;
  server_node: 2 nodes x 1 GPU, ``--vllm-mode server``: the second node runs ``vllm serve`` and
            nothing else, the first trains the whole batch, the weights go to the server over
            the link between the nodes (the fair server-mode layout on one-GPU nodes:
            ``--runs colocate,server_node``).
Both make the same 64 completions a step (8 generations of 8 prompts; 256 new tokens at most).
The sandbox is restarted between layouts (seconds); rounds alternate the order so drift cancels.
s/step is the mean wall time of steps 2..N (step 1 includes compilation). Anchor: TRL's
vLLM-colocate study measured 1.43x for Qwen2.5-1.5B; 0.5B on one host's 2 x H200 gave 1.28x.
Writes DIR/bench-multinode.json and prints the table with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

from bench_gpu import last_reward

REPO = Path(__file__).resolve().parent.parent
SANDBOX = REPO / "tests" / "cluster" / "sandbox.sh"
COMPLETIONS = 64
BATCH = {"num_generations": 8, "max_completion_length": 256, "learning_rate": 1e-5,
         "save_strategy": "no"}  # no checkpoint, not even the final one: not what is measured


def sandbox(gpus_per_node: int) -> None:
    env = {**os.environ, "HPC_GRPO_SANDBOX_GPUS_PER_NODE": str(gpus_per_node)}
    subprocess.run(["bash", str(SANDBOX), "stop"], capture_output=True, env=env)
    proc = subprocess.run(["bash", str(SANDBOX), "start"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"sandbox with {gpus_per_node} GPU(s) a node did not start:\n{proc.stderr[-3000:]}")


def site(out: Path, gpus_per_node: int) -> Path:
    """sandbox-gpu.yaml with this layout's GPUs per node and the benchmark's output root."""
    text = (REPO / "site_configs" / "sandbox-gpu.yaml").read_text()
    text = re.sub(r"(?m)^gpus_per_node: .*$", f"gpus_per_node: {gpus_per_node}", text)
    text = re.sub(r"(?m)^procs_per_node: .*$", "procs_per_node: 0", text)
    text = re.sub(r"(?m)^output_root: .*$", f"output_root: {out / 'runs'}", text)
    path = out / f"sandbox-gpu{gpus_per_node}.yaml"
    path.write_text(text)
    return path


def submit(site_path: Path, nodes: int, steps: int, per_rank: int, *extra: str) -> dict[str, Any]:
    sets = [f"--set={k}={v}" for k, v in {**BATCH, "per_device_train_batch_size": per_rank,
                                          "max_steps": steps}.items()]
    argv = [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site_path), "--nodes",
            str(nodes), "--model", "builtin:qwen2-1.5b", "--time", "00:30:00", "--wait", *sets, *extra]
    print("+", " ".join(argv), flush=True)
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - started
    match = re.search(r"dir (\S+)", proc.stdout)
    if proc.returncode != 0 or not match:
        return {"error": (proc.stdout[-2000:] + proc.stderr[-2000:]), "step_s": float("nan")}
    run_dir = Path(match.group(1))
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    record = json.loads((run_dir / "run.json").read_text())
    state = json.loads((run_dir / "state.json").read_text())
    ranks = json.loads((run_dir / "ranks.json").read_text())
    times = [m["wall_step_time"] for m in metrics if m.get("wall_step_time")]
    later = times[1:] or times
    split = [m["phases_s"] for m in metrics[1:] if m.get("phases_s")]
    first = metrics[0]
    return {
        "run_dir": str(run_dir), "wall_s": wall, "step_s": mean(later), "step_times": times,
        "startup_s": first["time"] - first["wall_step_time"] - state["started"],
        "tokens_per_s": mean(m["tokens_per_s"] for m in metrics[1:] if m.get("tokens_per_s")),
        "peak_gpu_gib": max((m.get("gpu_mem_peak_gib") or 0) for m in metrics),
        "reward_last": last_reward(metrics), "vllm": record["vllm"],
        "deepspeed": record.get("deepspeed"), "memory_plan": record.get("memory_plan"),
        "hosts": [r["hostname"] for r in ranks["ranks"]],
        "vllm_seeds": [r["vllm_seed"] for r in ranks["ranks"]],
        "phases_s": {k: mean(p.get(k, 0.0) for p in split) for k in sorted({k for p in split for k in p})},
    }


def run_colocate(out: Path, steps: int) -> dict[str, Any]:
    sandbox(1)
    return submit(site(out, 1), 2, steps, COMPLETIONS // 2)


def run_server(out: Path, steps: int) -> dict[str, Any]:
    sandbox(2)
    return submit(site(out, 2), 1, steps, COMPLETIONS, "--vllm-mode", "server")


def run_server_node(out: Path, steps: int) -> dict[str, Any]:
    sandbox(1)
    return submit(site(out, 1), 2, steps, COMPLETIONS, "--vllm-mode", "server")


LABELS = {"colocate": "colocate, 2 nodes x 1 GPU", "server": "server, 1 node: serve + train",
          "server_node": "server, 2 nodes: train | serve"}


def table(result: dict[str, Any]) -> str:
    lines = [f"bench-multinode {result['date']}  {result['gpu']}  qwen2-1.5b shape, "
             f"{COMPLETIONS} completions/step, steps 2..{result['steps']}",
             f"{'layout':<34}{'s/step':>8}{'tok/s':>9}{'start s':>9}{'peak GiB':>10}"]
    for name, runs in result["runs"].items():
        for r in runs:
            if "error" in r:
                lines.append(f"{name:<34}  failed: {r['error'].splitlines()[-1][:80] if r['error'] else ''}")
                continue
            label = LABELS[name]
            lines.append(f"{label:<34}{r['step_s']:>8.2f}{r['tokens_per_s']:>9.0f}"
                         f"{r['startup_s']:>9.0f}{r['peak_gpu_gib']:>10.1f}")
    if result.get("ratio"):
        lines.append(f"colocate is {result['ratio']:.2f}x server mode (s/step of server / colocate)")
    if result.get("ratio_server_node"):
        lines.append(f"colocate is {result['ratio_server_node']:.2f}x server mode on a node of its "
                     "own (s/step of server_node / colocate)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--runs", default="colocate,server")
    args = parser.parse_args()
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    names = args.runs.split(",")
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    fns = {"colocate": run_colocate, "server": run_server, "server_node": run_server_node}
    for i in range(args.rounds):
        for name in (names if i % 2 == 0 else names[::-1]):
            runs[name].append(fns[name](args.out, args.steps))
    ok = {n: [r["step_s"] for r in rs if "error" not in r] for n, rs in runs.items()}
    ratio, ratio_node = ((mean(ok[name]) / mean(ok["colocate"])
                          if ok.get(name) and ok.get("colocate") else None)
                         for name in ("server", "server_node"))
    result = {"date": time.strftime("%Y-%m-%d"), "gpu": f"{torch.cuda.device_count()} x "
              f"{torch.cuda.get_device_name(0)}", "steps": args.steps, "runs": runs, "ratio": ratio,
              "ratio_server_node": ratio_node}
    (args.out / "bench-multinode.json").write_text(json.dumps(result, indent=1))
    subprocess.run(["bash", str(SANDBOX), "stop"], capture_output=True)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
