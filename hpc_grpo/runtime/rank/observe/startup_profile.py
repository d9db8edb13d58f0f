"""On request, where rank 0's start-up goes function by function: with
``HPC_GRPO_STARTUP_PROFILE=1`` in the ranks' environment (a site profile's ``env``, or the
submitting shell's for the local scheduler), rank 0 runs under ``cProfile`` from the start of
its preparation (GRPOConfig, checks, inputs, TRL's trainer import, the model load, the engine
start, the resume record) to the Trainer's ``on_train_begin`` (after accelerate's and
DeepSpeed's prepare and a resume's checkpoint load), and writes what it found to
``logs/startup-profile-rank-0.txt`` (the entries with the most cumulative and the most own
time) and ``logs/startup-profile-rank-0.pstats`` (for ``python -m pstats``).

Why: ``startup.jsonl`` (rank/observe/startup_times.py) times the parts and a few calls inside them, but part
of the trainer part fell outside every timed call: about 18 s of 40 at 7B (2 x H200, session
40), 9-16 s of 45-100 at 0.5B on one H100 (session 41). Timing one more call per guess costs a
GPU loan per guess; one profile names them all.

Read it as where, not how long: ``cProfile`` slows pure-Python code (imports, Dynamo's tracing
in vLLM's compile) by up to about two times and leaves native code as it is. It sees the main
thread only (not the checkpoint prefetch's threads). Off by default: no cost unless asked.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_grpo.rundir import contract
from hpc_grpo.runtime.rank.context import HookContext

ENV = "HPC_GRPO_STARTUP_PROFILE"
NAME = "startup-profile-rank-0"
ENTRIES = 60  # of each ordering in the text file


def start(run_dir: Path, rank: int, env: Mapping[str, str]) -> cProfile.Profile | None:
    """A running profiler on rank 0 when ``ENV`` is 1, else None (nothing to do)."""
    if rank != 0 or env.get(ENV, "") != "1":
        return None
    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def write(profiler: cProfile.Profile, run_dir: Path) -> Path:
    """Stop ``profiler`` and write its text summary and raw stats to the run's logs; returns the
    text file."""
    profiler.disable()
    logs = run_dir / contract.LOGS
    logs.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(logs / f"{NAME}.pstats"))
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    text.write(f"rank 0 start-up under cProfile ({ENV}=1), to on_train_begin; "
               "pure Python runs up to about 2x slower under it\n\n== by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(ENTRIES)
    text.write("\n== by own time\n")
    stats.sort_stats("tottime").print_stats(ENTRIES)
    path = logs / f"{NAME}.txt"
    path.write_text(text.getvalue())
    return path


def write_after_failure(profiler: cProfile.Profile | None, run_dir: Path) -> None:
    """Stop and write the profile of a start-up that raised before the trainer was ready: where
    a failing start spent its time is as much asked for as a working one's."""
    if profiler is None:
        return
    try:  # a diagnostic never hides the failure being reported
        path = write(profiler, run_dir)
        print(f"[train] start-up profile (up to the failure): {path}", flush=True)
    except Exception as exc:  # noqa: BLE001  # the caller must still settle the failure
        print(f"[train] start-up profile not written: {exc}", flush=True)


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: rank 0's profiler (None elsewhere and when not asked for), silent."""
    write_at_train_begin(trainer, ctx.profiler, ctx.run_dir)
    return []


def write_at_train_begin(trainer: Any, profiler: cProfile.Profile | None, run_dir: Path) -> None:
    """Stop and write the profile at the Trainer's ``on_train_begin`` (once)."""
    if profiler is None:
        return
    from transformers import TrainerCallback  # here: the module imports without the training stack

    class StartupProfileCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self, running: cProfile.Profile) -> None:
            self.profiler: cProfile.Profile | None = running

        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if self.profiler is not None:
                profiler_now, self.profiler = self.profiler, None
                try:  # a diagnostic never ends a run
                    path = write(profiler_now, run_dir)
                    print(f"[train] start-up profile: {path}", flush=True)
                except OSError as exc:
                    print(f"[train] start-up profile not written: {exc}", flush=True)
            return control

    trainer.add_callback(StartupProfileCallback(profiler))
