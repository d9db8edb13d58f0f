"""Training time held by periodic saves, written at once against in the background
(``async_save``, ``runtime/rank/checkpoints/background_save.py``), side by side in one run.

    python benchmarks/bench_async_save.py [--site local] [--recipe recipes/tiny-cpu.yaml] \
        [--model MODEL] [--zero-stage N] [--steps 12] [--save-steps 2] [--rounds 1] \
        [--set KEY=VALUE ...] [--root DIR] [--out FILE.json]

Each round submits the same job twice through ``hpc-grpo submit --site SITE`` (and waits),
``async_save`` false then true (the order alternates from round to round), and reads each run's
saves ledger (saves.jsonl, ``rundir/ledgers.saves``): the seconds from each save's step end to
its completion marker, and the training time it held (a save written at once holds all of it).
Prints, per variant, the saves, the median seconds a save held training and took until marked,
each run's training time (its steps' ``step_time`` summed, saves not counted) and its wall time
(the summary's ``train_runtime``), and the async variant's held median over the synchronous
one's. The runs stay under ``--root`` (default: a folder under /tmp, removed at the end).

The final save of a run and a stop's save are written at once in both variants (training ends
after them); only the periodic ones differ, so ``--steps`` should leave several.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpc_grpo.rundir import ledgers  # noqa: E402

CLI = str(Path(sys.executable).with_name("hpc-grpo"))


def submit(args: argparse.Namespace, root: Path, name: str, background: bool) -> Path:
    """One run to its end; its run directory."""
    argv = [CLI, "submit", "--site", args.site, "--recipe", args.recipe, "--output-root",
            str(root), "--name", name, "--set", f"max_steps={args.steps}",
            "--set", f"save_steps={args.save_steps}",
            "--set", f"async_save={'true' if background else 'false'}"]
    argv += ["--model", args.model] if args.model else []
    argv += ["--zero-stage", str(args.zero_stage)] if args.zero_stage is not None else []
    for item in args.set or ():
        argv += ["--set", item]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{name}: hpc-grpo submit -> {done.returncode}\n{done.stdout[-3000:]}"
                         f"\n{done.stderr[-3000:]}")
    found = sorted(root.glob(f"{name}-*"))
    if not found:
        raise SystemExit(f"{name}: no run directory under {root}")
    return found[-1]


def measure(run_dir: Path, steps: int) -> dict[str, Any]:
    """The run's saves (periodic ones apart from the last step's) and its times."""
    saved = ledgers.saves(run_dir)
    periodic = [s for s in saved if s.step < steps]
    held = [s.seconds if s.held_s is None else s.held_s for s in periodic]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"run": run_dir.name, "saves": len(periodic),
            "held_s": held, "held_median_s": median(held) if held else None,
            "until_marked_median_s": median([s.seconds for s in periodic]) if periodic else None,
            "train_s": round(sum(float(r.get("step_time") or 0) for r in rows), 3),
            "train_runtime_s": summary.get("train_runtime"),
            "rewards": [r.get("reward_mean") for r in rows]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="local")
    parser.add_argument("--recipe", default=str(REPO / "recipes" / "tiny-cpu.yaml"))
    parser.add_argument("--model", default="")
    parser.add_argument("--zero-stage", type=int, default=None)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--save-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--set", action="append", help="more --set KEY=VALUE for both variants")
    parser.add_argument("--root", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-async-save-"))
    results: dict[str, list[dict[str, Any]]] = {"at_once": [], "background": []}
    try:
        for round_no in range(args.rounds):
            order = [False, True] if round_no % 2 == 0 else [True, False]
            for background in order:
                variant = "background" if background else "at_once"
                run_dir = submit(args, root, f"bench-{variant.replace('_', '-')}-r{round_no}",
                                 background)
                found = measure(run_dir, args.steps)
                results[variant].append(found)
                print(f"round {round_no} {variant}: {found['saves']} periodic saves, held "
                      f"median {found['held_median_s']} s, until marked median "
                      f"{found['until_marked_median_s']} s; training {found['train_s']} s, "
                      f"train_runtime {found['train_runtime_s']} s", flush=True)
        held = {v: median([h for r in rows for h in r["held_s"]]) for v, rows in results.items()
                if any(r["held_s"] for r in rows)}
        ratio = held["background"] / held["at_once"] if len(held) == 2 and held["at_once"] else None
        same = all(a["rewards"] == b["rewards"]
                   for a, b in zip(results["at_once"], results["background"], strict=True))
        print(f"held per periodic save, median: at once {held.get('at_once')} s, in the "
              f"background {held.get('background')} s; background / at once "
              f"{'n/a' if ratio is None else f'{ratio:.3f}'}; rewards equal step for step: {same}")
        if args.out:
            Path(args.out).write_text(json.dumps({"args": vars(args), "results": results,
                                                  "held_median_s": held, "ratio": ratio,
                                                  "rewards_equal": same}, indent=2))
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
