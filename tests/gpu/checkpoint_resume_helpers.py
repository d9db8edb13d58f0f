"""Helpers of the checkpoint/resume GPU tests, shared by the other GPU test modules (moved out of
test_checkpoint_resume.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.gpu.multinode_helpers import _saved

GIB = float(2**30)


def _work(sub: str = "") -> Path:
    work = Path(os.environ.get("HPC_GRPO_WORK", "/tmp/ckpt-gpu")) / sub
    work.mkdir(parents=True, exist_ok=True)
    return work


def _cli(*args: str, timeout: int = 560) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPC_GRPO_HOME": str(_work() / "home")}
    return subprocess.run([sys.executable, "-m", "hpc_grpo.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def eval_result(target: str | Path, *args: str) -> dict[str, Any]:
    """``hpc-grpo eval TARGET ARGS --json``: its exit, wall time, the eval record it wrote and the
    tail of its stderr, as the GPU tests save them."""
    started = time.time()
    proc = _cli("eval", str(target), *args, "--json")
    record = json.loads(Path(json.loads(proc.stdout)["path"]).read_text()) \
        if proc.returncode == 0 else {}
    return {"args": list(args), "exit": proc.returncode, "wall_s": round(time.time() - started, 1),
            "record": record, "stderr_tail": proc.stderr[-2000:]}


class HostPeak:
    """Peak resident memory of a process and its children: RSS summed every 0.5 s (``stop()``,
    what earlier runs saved) and PSS summed every 2 s (``pss_gib()``, each page counted once).

    The RSS sum counts a page again in every process that maps it, and a rank forks about one
    torch inductor compile worker per core: on 2 x H200 (32 cores, 2 ranks, 2026-11-26) 66
    workers of 0.36 GiB RSS each added 25 GiB to the sum that the node never lost (its
    MemTotal - MemAvailable grew by 36.4 GiB against a 61.0 GiB RSS sum). PSS, from
    /proc/PID/smaps_rollup, shares each page among its mappers, so it sums to what the tree
    holds, whatever else runs on the machine. ``detail()`` keeps the split at both peaks and
    the node's own count (other tenants of the machine included)."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self.root = psutil.Process(pid or os.getpid())
        self.peak = 0
        self.at_peak: list[dict[str, Any]] = []
        self.pss_peak = 0.0
        self.at_pss_peak: dict[str, float] = {}
        self.node_base = self._node_used()
        self.node_peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    @staticmethod
    def _node_used() -> int:
        from hpc_grpo.runtime.shared.host_memory import memory

        node = memory()
        return int(node["total"]) - int(node["available"])

    @staticmethod
    def _split(proc: Any) -> dict[str, Any]:
        from hpc_grpo.runtime.rank.observe.memory import from_status

        try:
            split: dict[str, Any] = from_status(Path(f"/proc/{proc.pid}/status").read_text())
            split["cmd"] = " ".join(proc.cmdline()[:4])[-120:]
        except Exception:  # gone between listing and reading (OSError, psutil's errors)
            return {}
        return split

    @staticmethod
    def _pss(procs: list[Any]) -> dict[str, float]:
        """Pss, Pss_Anon, Pss_File, Pss_Shmem summed over ``procs``, in GiB."""
        sums = {"Pss": 0.0, "Pss_Anon": 0.0, "Pss_File": 0.0, "Pss_Shmem": 0.0}
        for proc in procs:
            try:
                text = Path(f"/proc/{proc.pid}/smaps_rollup").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(":")
                if key in sums:
                    sums[key] += int(value.split()[0]) * 1024 / GIB
        return {k: round(v, 3) for k, v in sums.items()}

    def _loop(self) -> None:
        import psutil

        tick = 0
        while not self.done.wait(0.5):
            tick += 1
            total = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                for proc in procs:
                    total += proc.memory_info().rss
            except psutil.Error:
                continue
            self.node_peak = max(self.node_peak, self._node_used())
            if total > self.peak:
                self.peak = total
                self.at_peak = [s for s in (self._split(p) for p in procs) if s.get("rss", 0) > 0.1]
            if tick % 4 == 0:
                pss = self._pss(procs)
                if pss["Pss"] > self.pss_peak:
                    self.pss_peak, self.at_pss_peak = pss["Pss"], pss

    def stop(self) -> float:
        """The peak RSS sum in GiB (sampling ends)."""
        self.done.set()
        self.thread.join()
        return round(self.peak / GIB, 2)

    def pss_gib(self) -> float:
        return round(self.pss_peak, 2)

    def detail(self) -> dict[str, Any]:
        """The processes at the RSS peak (over 0.1 GiB each; compile workers as one line), the
        PSS split at its peak, and the node's count."""
        keys = ("rss", "anon", "file", "shmem")
        workers = [p for p in self.at_peak if "compile_worker" in p.get("cmd", "")]
        others = [p for p in self.at_peak if p not in workers]
        return {"processes": others,
                "compile_workers": {"count": len(workers),
                                    "rss": round(sum(p.get("rss", 0.0) for p in workers), 2)},
                "summed": {k: round(sum(p.get(k, 0.0) for p in self.at_peak), 2) for k in keys},
                "pss_at_peak_gib": self.at_pss_peak,
                "node_used_peak_less_start_gib": round((self.node_peak - self.node_base) / GIB, 2)}


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _node_env() -> dict[str, str]:
    """This process's environment without Slurm's: the node task as a local run starts it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def _node(run_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, "-m", "hpc_grpo.runtime.node", str(run_dir)]
    log = open(run_dir / f"node-{int(time.time())}.log", "w")  # noqa: SIM115
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True), time.time()


def _copy_record(ref: dict[str, Any], run_dir: Path) -> None:
    """The reference's run.json in a new run directory (the same plan, seed and model)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    record = json.loads((Path(ref["run_dir"]) / "run.json").read_text())
    record.update(run_id=run_dir.name, run_dir=str(run_dir))
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))


def _copy_of(result: str, folder: str, first: str) -> tuple[dict[str, Any], Path]:
    """The saved result ``result`` (written by ``-k first``) and a new run directory ``folder``
    beside its run, holding a copy of its run record."""
    ref = _saved(result)
    assert ref, f"run -k {first} first (same HPC_GRPO_RESULTS)"
    run_dir = Path(ref["run_dir"]).parent / folder
    _copy_record(ref, run_dir)
    return ref, run_dir


def _cold_caches(env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """``env`` with empty vLLM, inductor and triton caches (a node that never compiled this
    model), and their folder, to delete afterwards."""
    cold = _work() / f"cold-{int(time.time())}"
    return {**env, "VLLM_CACHE_ROOT": str(cold / "vllm"), "TORCHINDUCTOR_CACHE_DIR":
            str(cold / "inductor"), "TRITON_CACHE_DIR": str(cold / "triton")}, cold


def _attempt(run_dir: Path, env: dict[str, str], stop_after: int | None) -> dict[str, Any]:
    """Start the node task; SIGUSR2 it once `stop_after` new steps were logged (None: run on).
    New steps are the rows logged after the start: a resume first truncates metrics.jsonl to
    its checkpoint's step (runtime/rank/train.py), so counting rows would miss the first ones
    after an attempt whose last save was skipped. The signal lands after the step being run
    when the row appears, so the attempt stops one step later (stop_after=1: two new steps)."""
    proc, t0 = _node(run_dir, env)
    peak = HostPeak(proc.pid)
    first_new = None
    while proc.poll() is None:
        new = [row for row in _metrics(run_dir) if row["time"] > t0]
        if first_new is None and new:
            first_new = new[0]["time"] - t0
        if stop_after is not None and len(new) >= stop_after:
            proc.send_signal(signal.SIGUSR2)  # the node task alone, as Slurm's --signal B:USR2
            stop_after = None
        time.sleep(0.2)
    state = json.loads((run_dir / "state.json").read_text())
    return {"started": t0, "exit": proc.returncode, "first_new_step_s": round(first_new or -1, 1),
            "wall_s": round(time.time() - t0, 1), "host_rss_peak_gib": peak.stop(),
            "host_pss_peak_gib": peak.pss_gib(),
            "phase": state.get("phase"), "step": state.get("step"),
            "stop_cause": state.get("stop_cause"), "resumed_from": state.get("resumed_from")}
