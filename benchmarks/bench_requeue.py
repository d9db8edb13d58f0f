"""Steps lost and time back to training per interruption: hpc-grpo's coordinated stop against
periodic checkpoints only (the open-r1 way), on the real sandbox Slurm cluster.

The same 2-node run (``--site sandbox --nodes 2 --recipe recipes/tiny-cpu.yaml``, max_steps=60,
save_steps=20) is interrupted K=3 times, at the same steps (between periodic saves), in up to
three ways, one run after the other:

A  ``scancel --signal=USR2 JOB``: what Slurm's ``--signal`` and ``preempt_send_user_signal``
   deliver. hpc-grpo stops all ranks on one step, checkpoints it and requeues.
B  the open-r1 way, periodic checkpoints only: ``scontrol requeue JOB`` to a job whose training
   processes die of SIGTERM without saving (a plain TRL/accelerate process has no handler, so
   Python's default action ends it). hpc-grpo itself catches SIGTERM, so this is emulated: the
   run's torchrun agents and ranks are frozen (SIGSTOP) just before the requeue and killed
   (SIGKILL) as soon as every node task has logged its SIGTERM, before they can reach a step
   end. The run resumes from the newest periodic checkpoint.
C  plain ``scontrol requeue JOB`` on hpc-grpo as it is (SIGTERM, SIGKILL after KillWait=5 s):
   shows what its SIGTERM handling saves.

For every interruption it reads, after the run has ended, restarts.jsonl (``steps_lost``,
``resumed_from_step``, ``cause``) and the ``time`` of the metrics.jsonl line of step
``resumed_from_step + 1`` (the first new step of the resumed attempt), minus the moment the
signal / requeue was sent. That time is split with ``sacct -D`` (one record per attempt, 1 s
resolution) into: signal -> the attempt ended, -> Slurm started the next one, -> its first new
step. It prints a table, the mean steps lost and mean signal-to-first-new-step time per way, the
median step time of each run (a check that the machine was equally loaded: a warning is printed
when they differ by more than 25%), the B/A ratios and whether A met the target of at most 1
step lost per signalled preemption. Exits 1 if a run fails (not COMPLETED at max_steps, a step
logged twice or missing, a wait timed out) and 2 if A misses the target.

Needs root and the cluster up (``bash tests/cluster/sandbox.sh status``). Waits (bounded) for an
idle cluster before each run, as other tests may be using it. Run from the repository root:

    .venv/bin/python benchmarks/bench_requeue.py            # A, B and C
    .venv/bin/python benchmarks/bench_requeue.py --modes AB --steps 60 --save-steps 20 --at 10,30,50

``--chaos`` runs the chaos benchmark instead (benchmarks/requeue_chaos.py): one long run hit by a
seeded random sequence of faults of every kind (10 of each by default), steps repeated and time
back to training per fault kind, the cause status recorded, and the per-step rewards compared
with an uninterrupted run:

    .venv/bin/python benchmarks/bench_requeue.py --chaos --per-kind 10 --save-steps 3 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "tiny-cpu.yaml"
TRAIN_MODULE = "hpc_grpo.runtime.rank.train"
POLL_S = 0.05  # state.json polling while waiting for a step (cheap: one small file read)


def cli_path() -> str:
    here = Path(sys.executable).with_name("hpc-grpo")
    return str(here if here.exists() else REPO / ".venv" / "bin" / "hpc-grpo")


class BenchError(RuntimeError):
    """A run failed or a bounded wait ran out: the benchmark exits non-zero."""


@dataclass
class Interruption:
    target_step: int
    sent_at: float  # time.time() when the signal / requeue was sent
    step_at_send: int  # state.json step at that moment
    attempt: str  # the attempt that was interrupted


@dataclass
class RunResult:
    mode: str
    run_id: str
    job_id: str
    run_dir: Path
    interruptions: list[Interruption] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[tuple[float | None, float | None]] = field(default_factory=list)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- CLI and Slurm -----------------


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([cli_path(), *args], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise BenchError(f"hpc-grpo {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def submit(env: dict[str, str], root: Path, steps: int, save_steps: int,
           run_id: str) -> tuple[str, str, Path]:
    out = cli(env, "submit", "--output-root", str(root), "--no-wait", "--run-id", run_id,
              "--site", "sandbox", "--nodes", "2", "--recipe", str(RECIPE),
              "--set", f"max_steps={steps}", "--set", f"save_steps={save_steps}")
    match = re.search(r"run (\S+)\s+job (\S+)\s+dir (\S+)", out)
    if not match:
        raise BenchError(f"cannot parse the submit output:\n{out}")
    return match.group(1), match.group(2), Path(match.group(3))


def status(env: dict[str, str], run_id: str) -> dict[str, Any]:
    rows = json.loads(cli(env, "status", "--json", run_id))
    if len(rows) != 1:
        raise BenchError(f"status --json {run_id}: {rows}")
    return dict(rows[0])


def wait_idle_cluster(timeout: float) -> None:
    """Until no job is queued or running: runs stay sequential with whatever else uses the cluster."""
    deadline = time.monotonic() + timeout
    told = False
    while True:
        jobs = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        if not jobs:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the cluster stayed busy for {timeout:.0f} s:\n{jobs}")
        if not told:
            print(f"  waiting for an idle cluster (squeue: {' | '.join(jobs.splitlines())})", flush=True)
            told = True
        time.sleep(5.0)


def attempt_times(job: str) -> list[tuple[float | None, float | None]]:
    """(start, end) of each attempt of ``job``, oldest first, from accounting (``sacct -D``: one
    REQUEUED record per interrupted attempt); 1 s resolution; empty if accounting cannot tell."""
    proc = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "Start,End"],
                          capture_output=True, text=True, timeout=30)
    out: list[tuple[float | None, float | None]] = []
    for line in proc.stdout.splitlines():
        start, _, end = line.partition("|")
        out.append((_sacct_time(start), _sacct_time(end)))
    return out


def _sacct_time(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


# ---------------------------------------------------------------- run directory -----------------


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_training_step(env: dict[str, str], run_id: str, run_dir: Path, step: int, not_attempts: set[str],
                       timeout: float) -> dict[str, Any]:
    """Until a new attempt (not one already interrupted) is training at ``step`` or later."""
    deadline = time.monotonic() + timeout
    next_status = time.monotonic() + 5.0
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = read_json(run_dir / "state.json")
        if (state.get("phase") == "training" and state.get("attempt") not in not_attempts
                and int(state.get("step") or 0) >= step):
            return state
        if time.monotonic() > next_status:  # a failed job never reaches the step: stop early
            row = status(env, run_id)
            if row["finished"]:
                raise BenchError(f"{run_id} ended ({row['state']}) before step {step}: {row}")
            next_status = time.monotonic() + 5.0
        time.sleep(POLL_S)
    raise BenchError(f"timed out after {timeout:.0f} s waiting for {run_id} at step {step}: {state}")


def wait_finished(env: dict[str, str], run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    row = status(env, run_id)
    while not row["finished"]:
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {run_id} to end: {row}")
        time.sleep(1.0)
        row = status(env, run_id)
    return row


# ---------------------------------------------------------------- the interruptions -------------


def run_processes(run_dir: Path) -> list[tuple[int, bool]]:
    """(pid, is_rank) of this run's torchrun agents and ranks, on every node (one process table:
    the sandbox nodes are network namespaces of this machine)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if TRAIN_MODULE in cmd and str(run_dir) in cmd:
            found.append((int(proc.name), "torch.distributed.run" not in cmd))
    return found


def signal_usr2(job: str, _run_dir: Path, _world: int) -> float:
    sent = time.time()
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)
    return sent


def plain_requeue(job: str, _run_dir: Path, _world: int) -> float:
    sent = time.time()
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
    return sent


def requeue_term_fatal(job: str, run_dir: Path, world: int) -> float:
    """`scontrol requeue` to training processes that die of the SIGTERM without saving."""
    procs = run_processes(run_dir)
    if sum(1 for _, is_rank in procs if is_rank) < world:
        raise BenchError(f"found {procs} for {run_dir}, expected {world} ranks")
    logs = sorted((run_dir / "submitit").glob(f"{job}_*_log.out"))  # one per node task
    seen = {log: log.stat().st_size for log in logs}
    sent = time.time()
    for pid, _ in procs:  # frozen: no step end, no save, from this moment
        _kill(pid, signal.SIGSTOP)
    try:
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
        # Kill once every node task has its SIGTERM: killed earlier, torchrun exits first and the
        # rank-0 node task takes it for a crash ("node failure") and requeues the job itself too.
        # The slurmds deliver SIGCONT+SIGTERM up to ~0.1 s apart; SIGCONT wakes the ranks, so they
        # are stopped again and again until then.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not all(_logged_since(log, seen[log]) for log in logs):
            for pid, _ in procs:
                _kill(pid, signal.SIGSTOP)
            time.sleep(0.002)
    finally:
        for pid, _ in procs:
            _kill(pid, signal.SIGKILL)
    return sent


def _logged_since(log: Path, offset: int) -> bool:
    """Whether the node task wrote its "SIGTERM: stop requested" line after ``offset``."""
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            return b"SIGTERM: stop requested" in fh.read()
    except OSError:
        return False


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@dataclass(frozen=True)
class Mode:
    key: str
    label: str
    interrupt: Callable[[str, Path, int], float]


MODES = {
    "A": Mode("A", "hpc-grpo coordinated stop (scancel --signal=USR2)", signal_usr2),
    "B": Mode("B", "periodic checkpoints only, open-r1 way (scontrol requeue, SIGTERM fatal)",
              requeue_term_fatal),
    "C": Mode("C", "hpc-grpo under plain scontrol requeue (SIGTERM, KILL after KillWait)", plain_requeue),
}


# ---------------------------------------------------------------- one run -----------------------


def one_run(mode: Mode, env: dict[str, str], root: Path, args: argparse.Namespace) -> RunResult:
    wait_idle_cluster(args.idle_timeout)
    start = time.monotonic()
    run_id, job, run_dir = submit(env, root, args.steps, args.save_steps, f"requeue-{mode.key.lower()}")
    result = RunResult(mode.key, run_id, job, run_dir)
    print(f"  {mode.key}: run {run_id} job {job} dir {run_dir}", flush=True)
    world = int(read_json(run_dir / "run.json").get("world_size") or 0)
    interrupted: set[str] = set()
    try:
        for target in args.at:
            state = wait_training_step(env, run_id, run_dir, target, interrupted, args.step_timeout)
            state = read_json(run_dir / "state.json") or state  # the freshest step before sending
            sent = mode.interrupt(job, run_dir, world)
            attempt = str(state.get("attempt"))
            at_send = int(state.get("step") or 0)
            result.interruptions.append(Interruption(target, sent, at_send, attempt))
            interrupted.add(attempt)
            print(f"     {mode.key} interruption {len(result.interruptions)}: step {at_send} "
                  f"(attempt {attempt})", flush=True)
        result.final = wait_finished(env, run_id, args.run_timeout)
    except BaseException:
        subprocess.run([cli_path(), "cancel", run_id], env=env, capture_output=True, timeout=60)
        raise
    result.wall_s = time.monotonic() - start
    result.restarts = read_jsonl(run_dir / "restarts.jsonl")
    result.attempts = attempt_times(job)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    result.metrics = {int(r["step"]): r for r in rows}
    steps = [int(r["step"]) for r in rows]
    if result.final.get("state") != "COMPLETED" or int(result.final.get("step") or 0) != args.steps:
        result.problems.append(f"ended {result.final.get('state')} at step {result.final.get('step')}")
    if steps != list(range(1, args.steps + 1)):
        result.problems.append(f"metrics steps are not 1..{args.steps} once each: {steps}")
    if len(result.restarts) != len(result.interruptions):
        result.problems.append(f"{len(result.restarts)} restarts recorded for "
                               f"{len(result.interruptions)} interruptions: {result.restarts}")
    return result


# ---------------------------------------------------------------- report ------------------------


@dataclass(frozen=True)
class Row:
    mode: str
    index: int
    step_at_send: int
    stopped_at: Any
    resumed_from: int
    steps_lost: int
    to_end_s: float | None  # signal -> the interrupted attempt ended (sacct, 1 s resolution)
    to_start_s: float | None  # that end -> Slurm started the next attempt (sacct)
    start_to_step_s: float | None  # that start -> its first new step
    to_first_step_s: float | None  # signal -> the resumed attempt's first new step
    cause: str


def rows_of(result: RunResult) -> list[Row]:
    out = []
    for i, (sig, rec) in enumerate(zip(result.interruptions, result.restarts, strict=False), start=1):
        resumed = int(rec.get("resumed_from_step") or 0)
        later = result.restarts[i:]
        first = result.metrics.get(resumed + 1)
        first_s: float | None = None
        if first is not None and not any(int(r.get("resumed_from_step") or 0) <= resumed for r in later):
            first_s = float(first["time"]) - sig.sent_at
            if first_s <= 0:  # a line of the interrupted attempt: cannot be the resumed one's
                first_s = None
        if first_s is None:
            result.problems.append(f"interruption {i}: no first new step after {resumed} to time")
        to_end = to_start = start_to_step = None
        if len(result.attempts) == len(result.restarts) + 1:  # attempt i-1 interrupted, i resumed
            end, start = result.attempts[i - 1][1], result.attempts[i][0]
            to_end = end - math.floor(sig.sent_at) if end is not None else None  # sacct: whole seconds
            to_start = start - end if start is not None and end is not None else None
            if start is not None and first is not None and first_s is not None:
                start_to_step = float(first["time"]) - start
        out.append(Row(result.mode, i, sig.step_at_send, rec.get("stopped_at_step"), resumed,
                       int(rec.get("steps_lost") or 0), to_end, to_start, start_to_step, first_s,
                       str(rec.get("cause"))))
    return out


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(num: float | None, den: float | None) -> str:
    if num is None or den is None:
        return "n/a"
    if den == 0:
        return "undefined (none lost with A)" if num > 0 else "1.0"
    return f"{num / den:.1f}x"


def report(results: list[RunResult], args: argparse.Namespace) -> bool:
    all_rows = {r.mode: rows_of(r) for r in results}
    print()
    print(f"requeue benchmark: 2 nodes x 2 ranks, tiny-cpu, max_steps={args.steps}, "
          f"save_steps={args.save_steps}, interruptions at steps {','.join(map(str, args.at))}")
    print()
    print("| way | # | signal at step | stopped at | resumed from | steps lost | signal -> job ended (s) | "
          "ended -> next attempt started (s) | started -> first new step (s) | "
          "**signal -> first new step (s)** | cause |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, rows in all_rows.items():
        for row in rows:
            print(f"| {mode} | {row.index} | {row.step_at_send} | {row.stopped_at} | {row.resumed_from} | "
                  f"{row.steps_lost} | {fmt(row.to_end_s, 0)} | {fmt(row.to_start_s, 0)} | "
                  f"{fmt(row.start_to_step_s, 0)} | {fmt(row.to_first_step_s, 1)} | {row.cause} |")
    print()
    print("| way | what | mean steps lost / interruption | mean signal -> first new step (s) | "
          "median step time (s) | run wall time (s) |")
    print("|---|---|---|---|---|---|")
    lost: dict[str, float | None] = {}
    back: dict[str, float | None] = {}
    pace: dict[str, float] = {}
    for result in results:
        rows = all_rows[result.mode]
        lost[result.mode] = mean([float(r.steps_lost) for r in rows])
        back[result.mode] = mean([r.to_first_step_s for r in rows if r.to_first_step_s is not None])
        pace[result.mode] = statistics.median(float(m.get("step_time") or 0) for m in result.metrics.values())
        print(f"| {result.mode} | {MODES[result.mode].label} | {fmt(lost[result.mode])} | "
              f"{fmt(back[result.mode], 1)} | {pace[result.mode]:.3f} | {result.wall_s:.0f} |")
    print()
    if "A" in lost and "B" in lost:
        print(f"steps lost per interruption, B / A: {ratio(lost['B'], lost['A'])} "
              f"({fmt(lost['B'])} vs {fmt(lost['A'])})")
        print(f"signal -> first new step, B / A: {ratio(back['B'], back['A'])} "
              f"({fmt(back['B'], 1)} s vs {fmt(back['A'], 1)} s)")
    if pace and max(pace.values()) > 1.25 * min(pace.values()):
        paces = ", ".join(f"{k} {v:.3f} s" for k, v in pace.items())
        print(f"warning: median step times differ by more than 25% between runs ({paces}): the machine "
              "was busier during some runs, so their times are not comparable")
    odd = [r for r in all_rows.get("B", []) if r.cause != "killed (no stop recorded)"]
    for row in odd:
        print(f"note: B interruption {row.index} recorded cause {row.cause!r}, not a plain kill: the "
              "emulated fatal SIGTERM raced hpc-grpo's own handling")
    met = True
    if "A" in all_rows:
        worst = max((r.steps_lost for r in all_rows["A"]), default=0)
        met = bool(all_rows["A"]) and worst <= 1
        print(f"target, A loses at most 1 step per signalled preemption: {'MET' if met else 'NOT MET'} "
              f"(worst {worst})")
    curves = {r.mode: [r.metrics[s].get("reward_mean") for s in sorted(r.metrics)] for r in results}
    if len(curves) > 1:
        same = len({json.dumps(c) for c in curves.values()}) == 1
        print(f"per-step rewards identical across the runs (same seed): {'yes' if same else 'no'}")
    return met


# ---------------------------------------------------------------- main --------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--modes", default="ABC", help="which ways to run, in order (default ABC)")
    parser.add_argument("--steps", type=int, default=60, help="max_steps (default 60)")
    parser.add_argument("--save-steps", type=int, default=20, help="periodic save interval (default 20)")
    parser.add_argument("--at", default="10,30,50",
                        help="steps to interrupt at, between periodic saves (default 10,30,50)")
    parser.add_argument("--step-timeout", type=float, default=300, help="bound on reaching each step")
    parser.add_argument("--run-timeout", type=float, default=600, help="bound on a run's end after "
                        "its last interruption")
    parser.add_argument("--idle-timeout", type=float, default=1800, help="bound on waiting for an "
                        "idle cluster before each run")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    chaos = parser.add_argument_group("chaos benchmark (benchmarks/requeue_chaos.py)")
    chaos.add_argument("--chaos", action="store_true", help="one long run hit by a seeded random "
                       "sequence of faults of every kind, against an uninterrupted run")
    chaos.add_argument("--per-kind", type=int, default=10, help="faults of each kind (default 10)")
    chaos.add_argument("--kinds", default="user,batch,preempt,timelimit,requeue,node,crash",
                       help="fault kinds, comma-separated (default: all)")
    chaos.add_argument("--seed", type=int, default=13, help="seed of the fault order (default 13)")
    chaos.add_argument("--gap", type=int, default=4, help="steps trained between a resume and "
                       "the next fault (default 4)")
    chaos.add_argument("--chaos-steps", type=int, default=0, help="max_steps of the chaos run "
                       "(default: enough for the faults)")
    chaos.add_argument("--fault-timeout", type=float, default=240, help="bound on a fault's restart")
    chaos.add_argument("--json", default="", help="write the chaos result here")
    chaos.add_argument("--chaos-set", action="append", default=[], metavar="KEY=VALUE",
                       help="a GRPOConfig setting for both chaos runs, e.g. steps_per_generation=4 "
                       "(repeatable)")
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.upper() if m in MODES]
    args.at = [int(s) for s in args.at.split(",") if s.strip()]
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.chaos:
        from requeue_chaos import KINDS
        unknown = sorted(set(args.kinds) - set(KINDS))
        if unknown:
            parser.error(f"--kinds: unknown {unknown}; pick from {','.join(KINDS)}")
    if not args.modes:
        parser.error(f"--modes: pick from {''.join(MODES)}")
    if args.chaos:  # --at, --steps and --modes are the A/B/C runs' own
        return args
    if args.at != sorted(args.at) or args.at[-1] >= args.steps:
        parser.error("--at: increasing steps below --steps")
    if any(s % args.save_steps == 0 for s in args.at):
        parser.error("--at: pick steps between periodic saves, not on one")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if subprocess.run(["bash", str(REPO / "tests" / "cluster" / "sandbox.sh"), "status"],
                      capture_output=True).returncode != 0:
        print("the sandbox cluster is not up: bash tests/cluster/sandbox.sh start", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="bench-requeue-"))
    env = dict(os.environ, HPC_GRPO_HOME=str(tmp / "home"), HPC_GRPO_SITES=str(tmp / "sites"))
    if args.chaos:
        return _chaos(args, env, tmp)
    results: list[RunResult] = []
    failed = False
    try:
        for key in args.modes:
            print(f"{key}: {MODES[key].label}", flush=True)
            results.append(one_run(MODES[key], env, tmp / "runs", args))
        met = report(results, args)
    except (BenchError, subprocess.SubprocessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        failed, met = True, False
    for result in results:
        for problem in result.problems:
            print(f"FAILED {result.mode} ({result.run_dir}): {problem}", file=sys.stderr)
            failed = True
    if args.keep or failed:
        print(f"run directories kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        return 1
    return 0 if met else 2


def _chaos(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> int:
    sys.modules.setdefault("bench_requeue", sys.modules[__name__])  # one BenchError, run as a script
    import requeue_chaos

    try:
        code = requeue_chaos.main(args, env, tmp)
    except (BenchError, subprocess.SubprocessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        code = 1
    if args.keep or code:
        print(f"run directories kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
