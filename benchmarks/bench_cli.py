"""Cold start of ``hpc-grpo --help`` and ``hpc-grpo status`` over 1,000 runs.

Prints each as a ratio to ``python -c pass`` measured in the same run (targets: --help under
0.3 s, status under 1 s with one Slurm query for all runs). Run: ``python benchmarks/bench_cli.py``.
Uses a fake sacct/squeue that counts calls unless --real-slurm is given.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 7


def timed(argv: list[str], env: dict[str, str]) -> float:
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def make_runs(root: Path, home: Path, count: int) -> None:
    home.mkdir(parents=True)
    with (home / "runs.jsonl").open("w") as index:
        for i in range(count):
            run = root / f"bench-{i:04d}"
            run.mkdir(parents=True)
            (run / "run.json").write_text(json.dumps(
                {"run_id": run.name, "site": "sandbox", "grpo_config": {"max_steps": 100}}))
            (run / "jobs.jsonl").write_text(json.dumps({"job_id": str(1000 + i),
                                                        "event": "submitted"}) + "\n")
            (run / "state.json").write_text(json.dumps({"phase": "training", "step": 42}))
            (run / "metrics.jsonl").write_text("".join(
                json.dumps({"step": s, "reward_mean": -s / 10}) + "\n" for s in range(1, 43)))
            index.write(json.dumps({"run_id": run.name, "run_dir": str(run)}) + "\n")


def fake_slurm(bin_dir: Path, calls: Path) -> None:
    bin_dir.mkdir()
    for name in ("sacct", "squeue"):
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\necho {name} >> {calls}\n")
        path.chmod(0o755)


def main() -> None:
    exe = Path(sys.executable).with_name("hpc-grpo")
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        env = dict(os.environ, HPC_GRPO_HOME=str(tmpdir / "home"))
        calls = tmpdir / "calls.log"
        if "--real-slurm" not in sys.argv:
            fake_slurm(tmpdir / "bin", calls)
            env["PATH"] = f"{tmpdir / 'bin'}{os.pathsep}{env['PATH']}"
        make_runs(tmpdir / "runs", tmpdir / "home", 1000)
        base = timed([sys.executable, "-c", "pass"], env)
        help_s = timed([str(exe), "--help"], env)
        calls.unlink(missing_ok=True)
        status_s = timed([str(exe), "status", "--json"], env)
        sacct_calls = calls.read_text().count("sacct") / REPEATS if calls.exists() else -1
    print(f"python -c pass          {base:.3f} s")
    print(f"hpc-grpo --help         {help_s:.3f} s  ratio {help_s / base:.1f}x  target < 0.3 s")
    print(f"hpc-grpo status (1000)  {status_s:.3f} s  ratio {status_s / base:.1f}x  target < 1 s")
    print(f"sacct calls per status  {sacct_calls:g}")


if __name__ == "__main__":
    main()
