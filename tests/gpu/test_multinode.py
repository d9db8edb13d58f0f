"""Two Slurm nodes with one GPU each on one lent host: NCCL between the nodes' network
namespaces (sockets on eth0), an embedded vLLM engine per rank, ZeRO-3 across the nodes, and a
USR2 requeue by Slurm that resumes with every step's reward and loss equal to an uninterrupted
run's; and server mode with the second node serving only (``-k server_node``).

Marked ``multi_gpu``: needs root and 2 GPUs, skipped elsewhere. It starts the sandbox cluster
with ``HPC_GRPO_SANDBOX_GPUS_PER_NODE=1`` (Debian packages from ``HPC_GRPO_SANDBOX_DEBS`` on a
machine without a registry) and stops it at the end. docs/gpu.md gives the device calls. With
``HPC_GRPO_RESULTS`` set, the measured runs are written there as JSON (docs/results).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.clusterlib import cli, finished, submit, wait_for, wait_step
from tests.gpu.multinode_helpers import _save, _saved
from tests.paths import REPO

SANDBOX = REPO / "tests" / "cluster" / "sandbox.sh"
CHECKED = ("node", "rank", "local_rank", "tp_group", "tp_rank", "vllm_seed", "dp_shard")


def _args(steps: int, save_steps: int, per_device: int, *layout: str) -> tuple[str, ...]:
    """submit's arguments for a 1.5B run over both nodes, 8 generations of 128 tokens."""
    return ("--site", "sandbox-gpu", "--nodes", "2", "--model", "builtin:qwen2-1.5b", *layout,
            "--time", "00:30:00", "--set", f"max_steps={steps}", "--set", f"save_steps={save_steps}",
            "--set", f"per_device_train_batch_size={per_device}", "--set", "num_generations=8",
            "--set", "max_completion_length=128")


STEPS = 6
ARGS = _args(STEPS, 3, 8, "--zero-stage", "3")


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [
    pytest.mark.gpu, pytest.mark.multi_gpu,
    pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox cluster needs root"),
]


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[None]:
    """The sandbox restarted with one GPU per node (a CPU sandbox left running is replaced)."""
    env = {**os.environ, "HPC_GRPO_SANDBOX_GPUS_PER_NODE": "1"}
    subprocess.run(["bash", str(SANDBOX), "stop"], capture_output=True, env=env)
    proc = subprocess.run(["bash", str(SANDBOX), "start"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"GPU sandbox did not start:\n{proc.stderr[-4000:]}"
    yield
    if os.environ.get("HPC_GRPO_KEEP_SANDBOX") != "1":
        subprocess.run(["bash", str(SANDBOX), "stop"], capture_output=True, env=env)


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _table(rendered_summary: str) -> list[dict[str, int]]:
    lines = [ln for ln in rendered_summary.splitlines() if ln and not ln.startswith("#")]
    header, rows = lines[0].split(), [ln.split() for ln in lines[1:]]
    names = {"local": "local_rank"}
    return [{names.get(h, h): int(v) for h, v in zip(header, row, strict=True)} for row in rows]


def _tail(run_dir: Path) -> str:
    logs = sorted((run_dir / "logs").glob("*.log")) + sorted((run_dir / "submitit").glob("*.err"))
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in logs)


def _timeline(run_dir: Path, job: str) -> dict[str, Any]:
    """Slurm's own timeline of the job's attempts (-D: each requeue is a row) and each attempt's
    start-up record, so that a restart's parts (requeue hold, allocation, start of the ranks,
    engine or server) are read from Slurm and the run, not guessed."""
    slurm_rows = subprocess.run(["sacct", "-D", "-X", "-P", "-n", "-j", job, "-o",
                                 "JobID,State,Submit,Eligible,Start,End"],
                                capture_output=True, text=True).stdout.splitlines()
    startup = run_dir / "startup.jsonl"
    return {"sacct": slurm_rows, "startup": [json.loads(x) for x in
                                             startup.read_text().splitlines()] if startup.exists() else []}


@pytest.fixture(scope="module")
def reference(gpu_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One uninterrupted run, and the rank table render promised for it. A later pytest session
    on the same machine (device calls are limited to 10 minutes each) reuses the one saved in
    HPC_GRPO_RESULTS while its run directory is still there."""
    saved = _saved("multinode-reference")
    if saved and Path(saved["run_dir"], "metrics.jsonl").exists():
        return saved
    root = tmp_path_factory.mktemp("reference") / "runs"
    args = (*ARGS, "--run-id", "gpu-ref-0001")
    rendered = cli("render", "--output-root", str(root), *args)
    started = time.time()
    run_id, job, run_dir = submit(root, *args)
    row = wait_for(run_id, finished, timeout=900)
    assert row["state"] == "COMPLETED", (row, _tail(run_dir))
    metrics = _metrics(run_dir)
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    result = {"run_id": run_id, "job": job, "run_dir": str(run_dir), "wall_s": time.time() - started,
              "table": _table(rendered.stderr), "ranks": ranks, "metrics": metrics,
              "run": json.loads((run_dir / "run.json").read_text())}
    _save("multinode-reference", result)
    return result


def test_two_gpu_nodes_train_with_zero3_as_rendered(reference: dict[str, Any]) -> None:
    ranks = reference["ranks"]
    assert [{k: r[k] for k in CHECKED} for r in ranks] == reference["table"]
    assert [r["vllm_seed"] for r in ranks] == [0, 1]
    assert [r["hostname"] for r in ranks] == ["node1", "node2"]
    assert ranks[0]["device_id"] and ranks[0]["device_id"] != ranks[1]["device_id"], ranks
    run = reference["run"]
    assert run["vllm"]["enabled"] and run["vllm"]["mode"] == "colocate"
    ds = json.loads((Path(reference["run_dir"]) / "deepspeed.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert [m["step"] for m in reference["metrics"]] == list(range(1, STEPS + 1))
    gens = {p.stem: [json.loads(x) for x in p.read_text().splitlines()]
            for p in (Path(reference["run_dir"]) / "generations").glob("rank-*.jsonl")}
    assert gens["rank-0"] and gens["rank-1"], "an engine generated nothing"
    assert gens["rank-0"][0]["sha256"] != gens["rank-1"][0]["sha256"]  # seeds 0 and 1


def _requeued_by_usr2(root: Path, args: tuple[str, ...], run_id: str,
                      step_timeout: int) -> dict[str, Any]:
    """Submit, `scancel --signal=USR2` once step 2 is logged, wait for the job's end: what the
    run recorded about it. The first new step is the one after the step resumed from: steps
    written by the signalled attempt between the signal and its stop are not new (the
    2026-11-23 record took step 3, 3.0 s after the signal, for it; step 4 came 91.7 s after)."""
    run_id, job, run_dir = submit(root, *args, "--run-id", run_id)
    at = wait_step(run_id, 2, timeout=step_timeout)["step"]
    signalled = time.time()
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    row = wait_for(run_id, finished, timeout=900)
    restarts = [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()] \
        if (run_dir / "restarts.jsonl").exists() else []
    metrics = _metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    resumed_from = int(restarts[0]["resumed_from_step"]) if restarts else 0
    new = [m for m in metrics if m["step"] == resumed_from + 1]
    return {"run_id": run_id, "job": job, "run_dir": run_dir, "row": row,
            "signalled_at_step": at, "signalled": signalled, "restarts": restarts,
            "metrics": metrics, "first_new_step_after_s": new[0]["time"] - signalled if new else None}


def _saved_fields(requeued: dict[str, Any]) -> dict[str, Any]:
    """The requeue's record for HPC_GRPO_RESULTS: its fields, Slurm's timeline and start-ups."""
    fields = ("run_id", "job", "signalled_at_step", "signalled", "restarts", "metrics",
              "first_new_step_after_s")
    return {**{k: requeued[k] for k in fields}, **_timeline(requeued["run_dir"], requeued["job"])}


def test_usr2_requeue_on_gpus_resumes_the_same_run(reference: dict[str, Any],
                                                    tmp_path: Path) -> None:
    requeued = _requeued_by_usr2(tmp_path / "runs", ARGS, "gpu-requeue-0001", 600)
    assert requeued["row"]["state"] == "COMPLETED", (requeued["row"], _tail(requeued["run_dir"]))
    restarts, metrics = requeued["restarts"], requeued["metrics"]
    _save("multinode-requeue", _saved_fields(requeued))
    assert len(restarts) >= 1, restarts
    assert restarts[0]["cause"] == "user signal", restarts  # a user's scancel, not a preemption
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))  # each step logged once
    ref = reference["metrics"]
    assert [(m["step"], m["reward_mean"]) for m in metrics] == [(m["step"], m["reward_mean"]) for m in ref]
    assert [m["loss"] for m in metrics] == [m["loss"] for m in ref]


# the lines of vllm serve's log that time its start-up and count its requests, kept with the
# run's JSON so a restart's server part is read from them (docs/benchmarks.md, session 37)
SERVER_MARKS = ("non-default args", "Initializing a V1 LLM engine", "Loading weights took",
                "torch.compile took", "Graph capturing finished", "init engine (profile",
                "Application startup complete", "init_weight_transfer_engine HTTP",
                "/v1/completions HTTP")
SERVER_STEPS = 4
SERVER_ARGS = _args(SERVER_STEPS, 2, 16, "--vllm-mode", "server")


def test_a_server_node_of_its_own_trains_and_requeues(gpu_cluster: None, tmp_path: Path) -> None:
    """Server mode on nodes of one GPU: node2 runs `vllm serve` and no rank, node1 trains the
    whole batch and pushes the weights to node2 over NCCL between the nodes; USR2 after step 2
    requeues both and the run resumes with no step lost and each step logged once."""
    requeued = _requeued_by_usr2(tmp_path / "runs", SERVER_ARGS, "gpu-server-node-0001", 900)
    run_dir, row = requeued["run_dir"], requeued["row"]
    restarts, metrics = requeued["restarts"], requeued["metrics"]
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    run = json.loads((run_dir / "run.json").read_text())
    server_log = (run_dir / "logs" / "vllm-server.log").read_text(errors="replace")
    _save("multinode-server-node", {
        **_saved_fields(requeued), "state": row["state"], "ranks": ranks, "run": run,
        "server_log_lines": [line[:200] for line in server_log.splitlines()
                             if any(mark in line for mark in SERVER_MARKS)],
        "trainers_ended": json.loads((run_dir / "trainers-ended.json").read_text())})
    assert row["state"] == "COMPLETED", (row, _tail(run_dir))
    assert run["nodes"] == 1 and run["vllm"]["server"]["node"] == 1
    assert [r["hostname"] for r in ranks] == ["node1"]  # node2 serves only
    # uvicorn's access lines: the trainer generated there, in both attempts (one step each)
    assert server_log.count('"POST /v1/completions HTTP') >= SERVER_STEPS, server_log[-2000:]
    assert restarts and restarts[0]["cause"] == "user signal" and restarts[0]["steps_lost"] == 0
    assert [m["step"] for m in metrics] == list(range(1, SERVER_STEPS + 1))
