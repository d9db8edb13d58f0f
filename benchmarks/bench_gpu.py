"""GPU benchmark: hpc-grpo against bare TRL, side by side in one run, on the lent GPU machine.

  python benchmarks/bench_gpu.py one --out DIR   # 1 GPU: colocate + sleep, hpc-grpo vs bare TRL,
                                                 #        and the planner's own choice vs measured
  python benchmarks/bench_gpu.py two --out DIR   # 2 GPUs: default plan, TP 2, server 1 + 1

Model: Qwen2-0.5B layer shapes, random weights, built offline (builtin:qwen2-0.5b). Prints a
table (machine, versions, s/step, tokens/s, peak GPU memory, ratios) and writes DIR/NAME.json.
Step time is the mean wall time of steps 2..N (step 1 includes compilation and warm-up).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STEPS = int(os.environ.get("BENCH_STEPS", "8"))
BATCH = dict(per_device_train_batch_size=32, num_generations=8, max_completion_length=256,
             learning_rate=1e-5, save_steps=100000)


def sh(argv: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> str:
    print("+", " ".join(argv), flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", flush=True)
        raise SystemExit(f"failed: {' '.join(argv)}")
    return proc.stdout


def gpu_info() -> tuple[str, float, int]:
    import torch

    props = torch.cuda.get_device_properties(0)
    return props.name, props.total_memory / 2**30, torch.cuda.device_count()


def site_file(out: Path, gpus: int, memory_gib: float) -> Path:
    path = out / f"gpu{gpus}.yaml"
    path.write_text(
        f"scheduler: local\ngpus_per_node: {gpus}\ngpu_memory_gib: {memory_gib:.0f}\n"
        f"cpu_memory_gib: 100\nmax_time: '04:00:00'\noutput_root: {out / 'runs'}\n")
    return path


def hpc_grpo(site: Path, *extra: str, batch: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run through the project's own CLI; returns its step times, memory and records."""
    sets = [f"--set={k}={v}" for k, v in {**BATCH, **(batch or {}), "max_steps": STEPS}.items()]
    started = time.perf_counter()
    out = sh([sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site),
              "--model", "builtin:qwen2-0.5b", "--time", "01:00:00", "--wait", *sets, *extra])
    wall = time.perf_counter() - started
    run_dir = Path(re.search(r"dir (\S+)", out).group(1))  # type: ignore[union-attr]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    record = json.loads((run_dir / "run.json").read_text())
    gens = {p.stem: [json.loads(x) for x in p.read_text().splitlines()]
            for p in sorted((run_dir / "generations").glob("rank-*.jsonl"))}
    ranks = json.loads((run_dir / "ranks.json").read_text())
    times = [m["wall_step_time"] for m in metrics[1:] if m.get("wall_step_time")]
    return {
        "run_dir": str(run_dir), "wall_s": wall, "step_s": mean(times),
        "tokens_per_s": mean(m["tokens_per_s"] for m in metrics[1:] if m.get("tokens_per_s")),
        "peak_gpu_gib": max((m.get("gpu_mem_peak_gib") or 0) for m in metrics),
        "planned": record.get("memory_plan"), "vllm": record["vllm"], "generations": gens,
        "ranks": ranks, "reward_last": metrics[-1].get("reward_mean"),
    }


def bare(out: Path, name: str, *flags: str, procs: int = 1) -> dict[str, Any]:
    target = out / f"{name}.json"
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={procs}",
                "--master-port=29533"] if procs > 1 else [sys.executable]
    model = Path(os.environ["HPC_GRPO_HOME"]) / "models" / "qwen2-0.5b"
    started = time.perf_counter()
    sh([*launcher, str(REPO / "benchmarks" / "bare_trl_grpo.py"), "--model", str(model),
        "--out", str(target), "--steps", str(STEPS), *flags])
    data = json.loads(target.read_text())
    return {"wall_s": time.perf_counter() - started, "step_s": mean(data["step_times"][1:]),
            "peak_gpu_gib": data["peak_gpu_gib"]}


def attempt(fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One failed configuration must not cost the others' numbers (device time is scarce)."""
    try:
        return dict(fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - SystemExit from sh() included
        return {"error": str(exc), "step_s": float("nan")}


def planned_peak(plan: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(the planner's budget, with its 10% fragmentation reserve; its estimate of use, without)."""
    if not plan:
        return None, None
    b = plan["breakdown_gib"]
    budget = max(b["total during training"], b["total during generation"])
    return budget, budget - b.get("fragmentation reserve", 0.0)


def part_one(out: Path) -> dict[str, Any]:
    name, memory, _ = gpu_info()
    site = site_file(out, 1, memory)
    same = ["--set=vllm_enable_sleep_mode=true", "--set=vllm_gpu_memory_utilization=0.3"]
    results: dict[str, Any] = {
        "bare_trl": attempt(bare, out, "bare1", "--sleep", "--gpu-util", "0.3"),
        "hpc_grpo": attempt(hpc_grpo, site, *same),
        "hpc_grpo_planned": attempt(hpc_grpo, site),
    }
    results["step_ratio_hpc_over_bare"] = results["hpc_grpo"]["step_s"] / results["bare_trl"]["step_s"]
    p = results["hpc_grpo_planned"]
    if "error" not in p:
        budget, use = planned_peak(p["planned"])
        p["planned_budget_gib"], p["planned_use_gib"] = budget, use
        p["use_error"] = (use - p["peak_gpu_gib"]) / p["peak_gpu_gib"] if use else None
    results["gpu"] = name
    return results


def part_two(out: Path) -> dict[str, Any]:
    name, memory, count = gpu_info()
    assert count >= 2, "part two needs 2 GPUs"
    site = site_file(out, 2, memory)
    zero = ["--zero-stage", "0"]  # plain data parallel on both sides, as the bare numbers ran
    results: dict[str, Any] = {
        "default_plan": attempt(hpc_grpo, site, *zero),
        "tp2": attempt(hpc_grpo, site, *zero, "--tp", "2"),
        # same 64 completions a step: one trainer takes the whole global batch
        "server": attempt(hpc_grpo, site, *zero, "--vllm-mode", "server",
                          batch={"per_device_train_batch_size": 64}),
    }
    for key in ("default_plan", "tp2"):
        results[f"ratio_{key}_over_server"] = results["server"]["step_s"] / results[key]["step_s"]
    results["gpu"] = name
    return results


def versions() -> dict[str, str]:
    import torch
    import transformers
    import trl

    out = {"torch": torch.__version__, "trl": trl.__version__, "transformers": transformers.__version__}
    try:
        import vllm

        out["vllm"] = vllm.__version__
    except ImportError:
        out["vllm"] = "absent"
    return out


def main() -> None:
    part, out = sys.argv[1], Path(sys.argv[sys.argv.index("--out") + 1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HPC_GRPO_HOME", str(out / "home"))
    model = Path(os.environ["HPC_GRPO_HOME"]) / "models" / "qwen2-0.5b"
    if not (model / "config.json").exists():  # the bare baseline needs it before any submit
        sh([sys.executable, "-m", "hpc_grpo.runtime.model_shapes", "qwen2-0.5b", str(model)])
    results = part_one(out) if part == "one" else part_two(out)
    results["versions"] = versions()
    results["steps"] = STEPS
    results["date"] = time.strftime("%Y-%m-%d")
    (out / f"bench-{part}.json").write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps({k: v for k, v in results.items()}, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
