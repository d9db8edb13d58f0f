"""GPU benchmark: hpc-grpo against bare TRL, side by side in one run, on the lent GPU machine.

  python benchmarks/bench_gpu.py one --out DIR [--runs pair,planned]   # BENCH_ROUNDS=2: 8 pair runs
      1 GPU. pair: hpc-grpo (colocate + sleep, the planner's vLLM share) and bare TRL given the
      very GRPOConfig kwargs the hpc-grpo run used (its grpo_config.json), in the order hpc,
      bare, bare, hpc so drift over the job cancels. hpc1,bare1,bare2,hpc2,... name single pair
      runs, so the rounds can be split over calls (each call is limited to 10 minutes).
      concurrent (2 GPUs): hpc-grpo and bare TRL at the same time on different GPUs and CPU
      halves, then swapped; BENCH_ROUNDS=N gives 2N slots. Drift over the job cancels per slot.
      planned: the planner's own choice at two batch shapes, predicted memory against measured.
  python benchmarks/bench_gpu.py two --out DIR [--runs plan,default_plan,server,tp2] [--shape S]
      2 GPUs, the same 64 completions a step: plan (the plan's own choice of every setting),
      default_plan (TP 1 x DP 2, ZeRO 0 forced: the earlier sessions' row), bare TRL given the
      default plan's GRPOConfig under torchrun on both GPUs, server mode (one GPU `vllm serve`,
      one GPU training the whole batch) and colocate TP 2. Diagnostics: bare_trl_defaults (bare
      TRL with TRL's and torchrun's own defaults: the bare-TRL README's run), split_threads (the
      default plan with the node's CPUs split over the ranks as OpenMP threads, hpc-grpo's
      choice before 2026-11-23), no_grad_ckpt (the default plan with gradient_checkpointing off),
      no_grad_ckpt_plan (the plan's ZeRO stage without recomputation), server_expandable (server
      mode with the trainer on torch's expandable segments: its reserve grew less, not flat).
      7B (--shape qwen2-7b, 2 x 80 GB): tp1_offload (TP 1, ZeRO-3, optimizer offload: the plan's
      runner-up) and server_offload (server mode, its one trainer with ZeRO-3 and optimizer
      offload, the only way it fits): --runs plan,tp1_offload,server_offload.
      Runs go in the order given; a name given twice, or already saved in DIR, is kept as
      name_2, name_3... and the ratios pool every run of a name: --runs plan,server,server,plan
      is two rounds in one call, each side first once.
  python benchmarks/bench_gpu.py table DIR/bench-one.json   # print a saved result again

Model: --shape names built-in layer shapes with random weights, built offline (default qwen2-0.5b;
qwen2-1.5b, qwen2-7b: hpc_grpo/rundir/shapes.py). Runs of one part merge into DIR/bench-PART.json
(bench-PART-SHAPE.json for another shape), so a part may be split over several calls; part two
writes it after every run. s/step is the mean wall time of steps 2..N (step 1 includes compilation
and warm-up).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean, median
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SHAPE = "qwen2-0.5b"
# the model's layer shapes (hpc_grpo/rundir/shapes.py), random weights: --shape qwen2-1.5b
SHAPE = sys.argv[sys.argv.index("--shape") + 1] if "--shape" in sys.argv else DEFAULT_SHAPE
# save_strategy "no": no checkpoint at all, not even the final one (a 7B save takes 60-130 s of
# device time and is not what a benchmark measures); s/step is unchanged by it
BATCH = dict(per_device_train_batch_size=32, num_generations=8, max_completion_length=256,
             learning_rate=1e-5, save_strategy="no", save_total_limit=1)


def last_reward(metrics: list[dict[str, Any]]) -> float | None:
    """The newest reward: a step that trained on an earlier generation logs none (also used by
    bench_multinode.py)."""
    return next((m["reward_mean"] for m in reversed(metrics) if m.get("reward_mean") is not None), None)


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
        f"cpu_memory_gib: {host_gib():.0f}\nmax_time: '04:00:00'\noutput_root: {out / 'runs'}\n")
    return path


def host_gib() -> float:
    """This machine's host memory as the ranks' hardware check reads it (MemTotal or a smaller
    job limit): 7B layouts with optimizer offload need more than the 100 GiB once written here
    (126 GiB on one rank), and only offload layouts read it."""
    from hpc_grpo.runtime.rank.setup.hardware_check import usable_host_gib

    return usable_host_gib({}) or 100.0


def step_stats(times: list[float]) -> dict[str, Any]:
    later = times[1:] or times
    return {"step_s": mean(later), "step_median_s": median(later), "steps_timed": len(later),
            "step_times": [round(t, 4) for t in times]}


class Launch:
    """Where one run goes: one GPU and its own half of the CPUs (a side of a concurrent pair),
    and OpenMP threads per rank other than hpc-grpo's own choice (a diagnostic run)."""

    def __init__(self, gpu: int | None = None, cpus: list[int] | None = None,
                 threads: int | None = None, extra_env: dict[str, str] | None = None) -> None:
        self.gpu, self.cpus, self.threads = gpu, cpus, threads
        self.extra_env = extra_env or {}

    def prefix(self) -> list[str]:
        if not self.cpus or shutil.which("taskset") is None:  # then only the thread count differs
            return []
        return ["taskset", "-c", ",".join(map(str, self.cpus))]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        if self.threads is not None:  # the node task keeps a set OMP_NUM_THREADS
            env["OMP_NUM_THREADS"] = str(self.threads)
        env.update(self.extra_env)
        return env


def hpc_grpo(site: Path, steps: int, *extra: str, batch: dict[str, Any] | None = None,
             launch: Launch | None = None) -> dict[str, Any]:
    """One run through the project's own CLI; returns its step times, memory and records."""
    launch = launch or Launch()
    sets = [f"--set={k}={v}" for k, v in {**BATCH, **(batch or {}), "max_steps": steps}.items()]
    started = time.perf_counter()
    out = sh([*launch.prefix(), sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site),
              "--model", f"builtin:{SHAPE}", "--time", "01:00:00", "--wait", *sets, *extra],
             env=launch.env())
    wall = time.perf_counter() - started
    run_dir = Path(re.search(r"dir (\S+)", out).group(1))  # type: ignore[union-attr]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    record = json.loads((run_dir / "run.json").read_text())
    state = json.loads((run_dir / "state.json").read_text())
    gens = {p.stem: [json.loads(x) for x in p.read_text().splitlines()]
            for p in sorted((run_dir / "generations").glob("rank-*.jsonl"))}
    ranks = json.loads((run_dir / "ranks.json").read_text())
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # GBs a run; the disk is small
    first = metrics[0]
    split = [m["phases_s"] for m in metrics[1:] if m.get("phases_s")]
    result: dict[str, Any] = {
        "run_dir": str(run_dir), "wall_s": wall,
        **step_stats([m["wall_step_time"] for m in metrics if m.get("wall_step_time")]),
        "trl_step_times": [round(m["step_time"], 4) for m in metrics if m.get("step_time")],
        "startup_s": first["time"] - first["wall_step_time"] - state["started"],
        "tokens_per_s": mean(m["tokens_per_s"] for m in metrics[1:] if m.get("tokens_per_s")),
        "peak_gpu_gib": max((m.get("gpu_mem_peak_gib") or 0) for m in metrics),
        # per step: does memory grow (server mode's trainer did, +3.1 GiB a step at 1.5B)?
        "gpu_mem_per_step_gib": [m.get("gpu_mem_peak_gib") for m in metrics],
        "torch_reserved_per_step_gib": [m.get("torch_reserved_peak_gib") for m in metrics],
        "layout": {k: record.get(k) for k in ("deepspeed", "memory_plan") if k in record},
        "shape": SHAPE,
        "torch_peaks_gib": {k: metrics[-1].get(k)
                            for k in ("torch_alloc_peak_gib", "torch_reserved_peak_gib")},
        "at_train_begin": state.get("gpu_mem_train_begin"),
        "planned": record.get("memory_plan"), "vllm": record["vllm"], "generations": gens,
        "vllm_seeds": [r["vllm_seed"] for r in ranks["ranks"]], "reward_last": last_reward(metrics),
        "grpo_config": str(run_dir / "grpo_config.json"),
        "omp_threads": launch.env().get("OMP_NUM_THREADS", "hpc-grpo's choice"),
        "phases_s": {k: mean(p.get(k, 0.0) for p in split) for k in sorted({k for p in split for k in p})},
    }
    server_log = run_dir / "logs" / "vllm-server.log"
    if server_log.exists():  # uvicorn's access lines: the trainer really generated there
        result["server_requests"] = server_log.read_text(errors="replace").count('"POST /v1/completions HTTP')
    budget, use = planned_peak(result["planned"])
    if use:
        result.update(planned_budget_gib=budget, planned_use_gib=use,
                      use_error=(use - result["peak_gpu_gib"]) / result["peak_gpu_gib"])
    return result


def bare(out: Path, name: str, steps: int, *flags: str, procs: int = 1,
         launch: Launch | None = None, port: int = 29533, torchrun_threads: bool = False
         ) -> dict[str, Any]:
    """Bare TRL under torchrun, like hpc-grpo's ranks (one process is a world of one), with
    the OpenMP threads hpc-grpo's node task would give a GPU rank; ``torchrun_threads`` leaves
    them to torchrun (1 per rank with several, all CPUs with one), as a user's script gets."""
    from hpc_grpo.runtime.node.environment import threads_per_rank, usable_cpus

    target = out / f"{name}.json"
    model = Path(os.environ["HPC_GRPO_HOME"]) / "models" / SHAPE
    launch = launch or Launch()
    cpus = len(launch.cpus) if launch.cpus else usable_cpus()
    env = launch.env()
    if torchrun_threads:
        env.pop("OMP_NUM_THREADS", None)
    elif launch.threads is None:
        env["OMP_NUM_THREADS"] = str(threads_per_rank(os.environ, cpus, procs, computes_on_host=False))
    started = time.perf_counter()
    sh([*launch.prefix(), sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={procs}",
        f"--master-port={port}", str(REPO / "benchmarks" / "bare_trl_grpo.py"), "--model", str(model),
        "--out", str(target), "--steps", str(steps), *flags], env=env)
    data = json.loads(target.read_text())
    return {"wall_s": time.perf_counter() - started, **step_stats(data["step_times"]),
            "trl_step_times": [round(t, 4) for t in data.get("trl_step_times", [])],
            "omp_threads": env.get("OMP_NUM_THREADS", "torchrun's default"),
            "startup_s": data["build_s"], "peak_gpu_gib": data["peak_gpu_gib"],
            "grpo_config": data.get("grpo_config")}


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


def hpc_grpo_config(results: dict[str, Any]) -> str | None:
    """The grpo_config.json of an hpc-grpo run of this output folder: what bare TRL is given."""
    return next((r["grpo_config"] for k, r in results.items()
                 if k.startswith("hpc_grpo_") and r.get("grpo_config")), None)


def part_one(out: Path, runs: list[str], steps: int, saved: dict[str, Any]) -> dict[str, Any]:
    _, memory, _ = gpu_info()
    site = site_file(out, 1, memory)
    # sleep mode on, vLLM's share from the planner; BENCH_UTIL=0.3 forces the bare-TRL README's
    same = ["--set=vllm_enable_sleep_mode=true"]
    if os.environ.get("BENCH_UTIL"):
        same.append(f"--set=vllm_gpu_memory_utilization={os.environ['BENCH_UTIL']}")
    results: dict[str, Any] = {}
    pair = runs
    if "pair" in runs:  # hpc, bare, bare, hpc per round
        rounds = range(1, 2 * int(os.environ.get("BENCH_ROUNDS", "1")) + 1, 2)
        pair = [name for r in rounds for name in (f"hpc{r}", f"bare{r}", f"bare{r + 1}", f"hpc{r + 1}")]
    for name in pair:
        number = name.removeprefix("hpc").removeprefix("bare")
        if not number.isdigit():
            continue
        if name.startswith("hpc"):
            results[f"hpc_grpo_{number}"] = attempt(hpc_grpo, site, steps, *same)
        else:
            kwargs = hpc_grpo_config({**saved, **results})
            flags = ["--grpo-json", kwargs] if kwargs else ["--sleep"]
            results[f"bare_trl_{number}"] = attempt(bare, out, f"bare{number}", steps, *flags)
    if any(k.startswith(("hpc_grpo_", "bare_trl_")) for k in results):
        results.update(pair_ratio({**saved, **results}))
    if "concurrent" in runs:
        results.update(concurrent_pairs(out, site, steps, same, {**saved, **results}))
    if "planned" in runs:
        results["planned_a"] = attempt(hpc_grpo, site, steps)
        results["planned_b"] = attempt(hpc_grpo, site, steps, batch={
            "per_device_train_batch_size": 16, "max_completion_length": 1024})
    return results


def concurrent_pairs(out: Path, site: Path, steps: int, same: list[str],
                     known: dict[str, Any]) -> dict[str, Any]:
    """hpc-grpo on one GPU while bare TRL runs on the other, each on half the CPUs, then swapped.

    Both sides of a slot see the same machine at the same moment, so drift over the job (which
    moved sequential runs of one program by up to 8%) cancels within the slot, and swapping the
    GPUs cancels a difference between them. Needs 2 GPUs.
    """
    assert gpu_info()[2] >= 2, "concurrent pairs need 2 GPUs"
    cpus = sorted(os.sched_getaffinity(0))
    sides = [Launch(0, cpus[: len(cpus) // 2]), Launch(1, cpus[len(cpus) // 2:])]
    results: dict[str, Any] = {}
    kwargs = hpc_grpo_config(known)
    if kwargs is None:  # the bare side needs an hpc-grpo run's GRPOConfig; this also warms caches
        results["warmup_hpc"] = attempt(hpc_grpo, site, 3, *same, launch=sides[0])
        kwargs = results["warmup_hpc"].get("grpo_config")
    slot = sum(1 for k in known if k.startswith("hpc_grpo_c"))
    for _ in range(int(os.environ.get("BENCH_ROUNDS", "1"))):
        for mine, theirs in ((0, 1), (1, 0)):
            slot += 1
            with ThreadPoolExecutor(2) as pool:
                hpc = pool.submit(attempt, hpc_grpo, site, steps, *same, launch=sides[mine])
                ref = pool.submit(attempt, bare, out, f"bare_c{slot}", steps, "--grpo-json", str(kwargs),
                                  launch=sides[theirs])
                results[f"hpc_grpo_c{slot}"] = {**hpc.result(), "gpu": mine}
                results[f"bare_trl_c{slot}"] = {**ref.result(), "gpu": theirs}
    return {**results, **concurrent_ratio({**known, **results})}


def concurrent_ratio(results: dict[str, Any]) -> dict[str, float]:
    """hpc-grpo over bare TRL per concurrent slot (both ran at the same time), and their spread."""
    slots = []
    for key, mine in results.items():
        theirs = results.get(key.replace("hpc_grpo_c", "bare_trl_c"), {})
        if key.startswith("hpc_grpo_c") and "error" not in mine and theirs and "error" not in theirs:
            slots.append(mine["step_s"] / theirs["step_s"])
    if not slots:
        return {}
    return {"concurrent_ratio_mean": mean(slots), "concurrent_ratio_lowest": min(slots),
            "concurrent_ratio_highest": max(slots), "concurrent_slots": float(len(slots))}


def pair_ratio(results: dict[str, Any]) -> dict[str, float]:
    """hpc-grpo over bare TRL: the ratio of the means, and the range over every pairing of one
    hpc-grpo run with one bare run, which says how far run-to-run noise alone moves it."""
    ok = {k: r for k, r in results.items()  # sequential runs only: hpc_grpo_N, bare_trl_N
          if isinstance(r, dict) and "error" not in r and k.rsplit("_", 1)[-1].isdigit()}
    hpc = [r for k, r in ok.items() if k.startswith("hpc_grpo_")]
    ref = [r for k, r in ok.items() if k.startswith("bare_trl_")]
    if not hpc or not ref:
        return {}
    pairs = [h["step_s"] / b["step_s"] for h in hpc for b in ref]
    out = {"step_ratio_hpc_over_bare": mean(h["step_s"] for h in hpc) / mean(b["step_s"] for b in ref),
           "step_ratio_lowest_pairing": min(pairs), "step_ratio_highest_pairing": max(pairs)}
    if all("step_median_s" in r for r in hpc + ref):  # robust to a slow step or two
        out["step_ratio_medians_hpc_over_bare"] = (median(h["step_median_s"] for h in hpc)
                                                   / median(b["step_median_s"] for b in ref))
    return out


def part_two(out: Path, runs: list[str], steps: int, saved: dict[str, Any],
             on_run: Callable[[dict[str, Any]], Any] = lambda done: None) -> dict[str, Any]:
    """The runs in the order given, so a second round can reverse it (server,plan after
    plan,server): a warm compile cache or a drifting machine then favours neither side.
    ``on_run`` gets the runs done so far after each one (main saves them)."""
    _, memory, count = gpu_info()
    assert count >= 2, "part two needs 2 GPUs"
    site = site_file(out, 2, memory)
    zero = ["--zero-stage", "0"]  # plain data parallel on both sides, as the bare numbers ran
    results: dict[str, Any] = {}
    server_batch = {"per_device_train_batch_size": 64}  # one trainer takes the whole global batch

    def bare_dp2() -> dict[str, Any]:  # bare TRL, the default plan's very GRPOConfig, both GPUs
        done = runs_named({**saved, **results}, "default_plan")  # the newest one's GRPOConfig
        kwargs = next((r["grpo_config"] for r in reversed(done) if r.get("grpo_config")), None)
        flags = ["--grpo-json", kwargs] if kwargs else ["--gpu-util", "0.1"]
        return bare(out, "bare_dp2", steps, *flags, procs=2)

    def split_threads() -> dict[str, Any]:  # the default plan, the node's CPUs split over 2 ranks
        from hpc_grpo.runtime.node.environment import threads_per_rank, usable_cpus

        split = Launch(threads=threads_per_rank(os.environ, usable_cpus(), 2))
        return hpc_grpo(site, steps, *zero, launch=split)

    expandable = Launch(extra_env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    no_ckpt = {"gradient_checkpointing": "false"}
    offload = ["--zero-stage", "3", "--set=offload_optimizer=true"]
    known: dict[str, Any] = {
        "plan": lambda: hpc_grpo(site, steps),  # the plan's own choice of everything
        "default_plan": lambda: hpc_grpo(site, steps, *zero),
        "bare_dp2": bare_dp2,
        "server": lambda: hpc_grpo(site, steps, *zero, "--vllm-mode", "server", batch=server_batch),
        "server_expandable": lambda: hpc_grpo(site, steps, *zero, "--vllm-mode", "server",
                                              batch=server_batch, launch=expandable),
        "no_grad_ckpt_plan": lambda: hpc_grpo(site, steps, batch=no_ckpt),  # the plan's ZeRO stage
        # the bare-TRL README's colocate DP 2: TRL's and torchrun's defaults
        "bare_trl_defaults": lambda: bare(out, "bare_trl_defaults", steps, procs=2,
                                          torchrun_threads=True),
        "split_threads": split_threads,
        "no_grad_ckpt": lambda: hpc_grpo(site, steps, *zero, batch=no_ckpt),
        "tp2": lambda: hpc_grpo(site, steps, *zero, "--tp", "2"),
        # 7B (--shape qwen2-7b) beside the plan's TP 2 ZeRO-3: the layouts it rejected that fit
        # two 80 GB cards, and server mode, whose one trainer needs the optimizer offloaded
        "tp1_offload": lambda: hpc_grpo(site, steps, "--tp", "1", *offload),
        "server_offload": lambda: hpc_grpo(site, steps, *offload, "--vllm-mode", "server",
                                           batch=server_batch),
    }
    unknown = [name for name in runs if name not in known]
    if unknown:
        raise SystemExit(f"unknown runs {unknown}; known: {', '.join(known)}")
    for name in runs:  # a repeated name (or one already saved in DIR) is kept as name_2, ...
        results[free_key({**saved, **results}, name)] = attempt(known[name])
        on_run(results)
    return results


def free_key(results: dict[str, Any], name: str) -> str:
    """``name`` for its first run, then name_2, name_3...: rounds in one output folder, or a
    layout repeated in one call (plan,server,server,plan), all stay in the saved JSON."""
    if name not in results:
        return name
    return next(f"{name}_{n}" for n in range(2, 1000) if f"{name}_{n}" not in results)


def runs_named(results: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every run of ``name`` (name, name_2, ...) that did not fail, oldest first."""
    return [r for key, r in results.items()
            if (key == name or re.fullmatch(rf"{re.escape(name)}_\d+", key))
            and isinstance(r, dict) and "error" not in r]


def mean_step(results: dict[str, Any], name: str) -> float | None:
    """Mean s/step over every run of ``name`` that did not fail (a NaN step counts as failed)."""
    times = [r["step_s"] for r in runs_named(results, name)
             if "step_s" in r and r["step_s"] == r["step_s"]]
    return mean(times) if times else None


def ratios(results: dict[str, Any]) -> None:
    """Same completions per step on the same GPUs, so step-time ratios are throughput ratios."""
    server = mean_step(results, "server")  # over every run of each (rounds in one folder)
    for key in ("plan", "default_plan", "no_grad_ckpt", "no_grad_ckpt_plan", "tp2", "tp1_offload"):
        mine = mean_step(results, key)
        if server and mine:
            results[f"ratio_{key}_over_server"] = server / mine
    server_offload, plan = mean_step(results, "server_offload"), mean_step(results, "plan")
    if server_offload and plan:  # 7B: server mode's one trainer only fits with offload
        results["ratio_plan_over_server_offload"] = server_offload / plan
    plan = mean_step(results, "default_plan")
    for key in ("bare_dp2", "bare_trl_defaults", "split_threads", "no_grad_ckpt", "server_expandable"):
        other = mean_step(results, key)
        if plan and other:
            results[f"step_ratio_default_plan_over_{key}"] = plan / other


def versions() -> dict[str, str]:
    """The stack's versions from the installed packages' metadata: importing vllm in this
    parent process would set variables in os.environ (vllm/env_override.py) that every later
    run inherits, and the runs must all start from the same environment."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("torch", "trl", "transformers", "vllm"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "absent"
    return out


def _cell(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and value == value else "-"


def table(results: dict[str, Any]) -> str:
    v = results.get("versions", {})
    lines = [f"machine: {results.get('gpu')} x {results.get('gpu_count')}, {results.get('date')}; "
             + ", ".join(f"{k} {x}" for k, x in v.items()) + f"; {results.get('steps')} steps a run",
             "| run | s/step (mean 2..N) | median | tokens/s | start s | peak GPU GiB | planned use GiB "
             "| planned error | vLLM seeds |", "|---" * 9 + "|"]
    for key, r in results.items():
        if not isinstance(r, dict) or "step_s" not in r:
            continue
        if "error" in r:
            lines.append(f"| {key} | failed: {r['error'][:80]} |" + " |" * 7)
            continue
        err = r.get("use_error")
        lines.append(
            f"| {key} | {_cell(r['step_s'], '.3f')} | {_cell(r.get('step_median_s'), '.3f')} "
            f"| {_cell(r.get('tokens_per_s'), ',.0f')} | {_cell(r.get('startup_s'), '.0f')} "
            f"| {_cell(r.get('peak_gpu_gib'), '.1f')} | {_cell(r.get('planned_use_gib'), '.1f')} "
            f"| {(f'{err:+.1%}' if err is not None else '-')} | {r.get('vllm_seeds', '-')} |")
    split = {key: r["phases_s"] for key, r in results.items()
             if isinstance(r, dict) and r.get("phases_s") and "error" not in r}
    if split:  # TRL's profiled blocks, rank 0, mean of steps 2..N (phases.py)
        lines += ["", "| run | generate | sync weights | rewards | prepare inputs | loss forward | rest "
                  "of TRL step | OMP threads |", "|---" * 8 + "|"]
        for key, p in split.items():
            rest = mean(results[key]["trl_step_times"][1:] or [float("nan")]) \
                - p.get("prepare_inputs_s", 0.0) - p.get("loss_forward_s", 0.0)
            lines.append(f"| {key} | " + " | ".join(_cell(p.get(k), ".3f") for k in (
                "generate_s", "sync_weights_s", "rewards_s", "prepare_inputs_s", "loss_forward_s"))
                + f" | {_cell(rest, '.3f')} | {results[key].get('omp_threads', '-')} |")
    for key, value in results.items():
        if key.startswith(("ratio", "step_ratio", "concurrent_ratio", "concurrent_slots")):
            lines.append(f"{key}: {value:.3f}")
    return "\n".join(lines)


def main() -> None:
    part = sys.argv[1]
    if part == "table":
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    out = Path(sys.argv[sys.argv.index("--out") + 1]).resolve()
    defaults = {"one": "pair,planned", "two": "default_plan,server,tp2"}[part]
    runs = (sys.argv[sys.argv.index("--runs") + 1] if "--runs" in sys.argv else defaults).split(",")
    steps = int(os.environ.get("BENCH_STEPS", "12" if part == "one" else "8"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HPC_GRPO_HOME", str(out / "home"))
    model = Path(os.environ["HPC_GRPO_HOME"]) / "models" / SHAPE
    if not (model / "config.json").exists():  # the bare baseline needs it before any submit
        sh([sys.executable, "-m", "hpc_grpo.runtime.models.build", SHAPE, str(model)])
    saved = out / f"bench-{part}{'' if SHAPE == DEFAULT_SHAPE else '-' + SHAPE}.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    name, _, count = gpu_info()
    meta = dict(versions=versions(), steps=steps, shape=SHAPE, date=time.strftime("%Y-%m-%d"),
                gpu=name, gpu_count=count)

    def write(new: dict[str, Any]) -> dict[str, Any]:
        """DIR's JSON with the runs returned so far, written after every run of part two: the
        device call's time limit may end this script before the last run (session 32's first
        call lost a finished pair that way; a run cut off before it returns is still lost)."""
        merged = {**results, **new, **meta}
        ratios(merged)
        save_json(saved, merged)
        return merged

    new = (part_one(out, runs, steps, results) if part == "one"
           else part_two(out, runs, steps, results, on_run=write))
    print(table(write(new)), flush=True)


def save_json(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all (a kill mid-write would leave a file the next call cannot read);
    a full disk is printed, not raised, so the runs still to come are not cancelled by it."""
    part = path.with_name(path.name + ".part")
    try:
        part.write_text(json.dumps(data, indent=1, default=str))
        os.replace(part, path)
    except OSError as err:
        print(f"could not save {path}: {err}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
