"""On real GPUs (marked ``gpu``; skipped without CUDA): embedded vLLM per rank, TP groups, seeds.

Run on the lent GPU machine: ``python -m pytest -m gpu tests/gpu/test_gpu.py`` (README, Development).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.gpu_helpers import _site, needs_gpu, needs_two

pytestmark = pytest.mark.gpu


def _run(site: Path, *extra: str) -> Path:
    sets = ["--set=max_steps=2", "--set=per_device_train_batch_size=8", "--set=num_generations=8",
            "--set=max_completion_length=64", "--set=save_steps=1000"]
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
         "builtin:qwen2-0.5b", "--wait", *sets, *extra],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match, proc.stdout
    return Path(match.group(1))


def _generations(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    return {int(p.stem.split("-")[1]): [json.loads(x) for x in p.read_text().splitlines()]
            for p in (run_dir / "generations").glob("rank-*.jsonl")}


@needs_gpu
def test_one_gpu_colocate_sleep(tmp_path: Path) -> None:
    run_dir = _run(_site(tmp_path, 1), "--set=vllm_enable_sleep_mode=true")
    state = json.loads((run_dir / "state.json").read_text())
    assert state["phase"] == "done"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["vllm"]["enabled"] and record["vllm"]["mode"] == "colocate"
    assert record["vllm"]["enable_sleep_mode"] is True
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["gpu_mem_peak_gib"] > 0 for m in metrics)
    assert _generations(run_dir)[0], "the embedded engine generated nothing"


@needs_gpu
def test_one_gpu_hang_is_dumped_and_ended_with_nccl_timeout_planned(tmp_path: Path) -> None:
    """Issue #13 on a GPU: the rank blocks in its reward in step 2 (test-only fault) while the
    colocated engine and NCCL are up; the watchdog (bounds 10 s once timed) writes its stack to
    its log and ends the attempt; the process group ran with the planned timeout."""
    site = _site(tmp_path, 1)
    site.write_text(site.read_text() + "watchdog_startup_s: 600\nwatchdog_min_s: 10\n")
    env = {**os.environ, "HPC_GRPO_FAULT_HANG_RANK": "0",
           "HPC_GRPO_FAULT_HANG_STEP": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_grpo.cli", "submit", "--site", str(site), "--model",
         "builtin:qwen2-0.5b", "--wait", "--set=max_steps=3", "--set=num_generations=8",
         "--set=per_device_train_batch_size=8", "--set=max_completion_length=64"],
        capture_output=True, text=True, timeout=900, env=env)
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match and proc.returncode != 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = Path(match.group(1))
    state = json.loads((run_dir / "state.json").read_text())
    assert state["stop_cause"] == "stalled" and state["stalled"]["steps"] == [1], state
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert "Current thread 0x" in log and "in hanging" in log, log[-3000:]
    config = json.loads((run_dir / "grpo_config.json").read_text())
    assert config["ddp_timeout"] == json.loads((run_dir / "run.json").read_text())[
        "collective_timeout_s"] == 600


@needs_two
def test_tp2_one_group_same_seed_same_completions(tmp_path: Path) -> None:
    run_dir = _run(_site(tmp_path, 2), "--tp", "2", "--zero-stage", "0")
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    assert [r["vllm_seed"] for r in ranks] == [0, 0]
    assert len({r["device_id"] for r in ranks}) == 2
    gens = _generations(run_dir)
    assert [g["sha256"] for g in gens[0]] == [g["sha256"] for g in gens[1]]


@needs_two
def test_tp1_dp2_two_seeds_different_completions(tmp_path: Path) -> None:
    run_dir = _run(_site(tmp_path, 2), "--tp", "1", "--zero-stage", "0")
    ranks = json.loads((run_dir / "ranks.json").read_text())["ranks"]
    assert [r["vllm_seed"] for r in ranks] == [0, 1]
    gens = _generations(run_dir)
    assert gens[0][0]["sha256"] != gens[1][0]["sha256"]


@needs_two
def test_server_mode_one_gpu_generates_one_trains(tmp_path: Path) -> None:
    run_dir = _run(_site(tmp_path, 2), "--vllm-mode", "server", "--zero-stage", "0")
    record = json.loads((run_dir / "run.json").read_text())
    server = record["vllm"]["server"]
    assert record["vllm"]["mode"] == "server"
    assert (server["gpus"], server["trainer_gpus"]) == ([0], [1])
    assert json.loads((run_dir / "state.json").read_text())["phase"] == "done"
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert json.loads((run_dir / "ranks.json").read_text())["world_size"] == 1
    log = (run_dir / "logs" / "vllm-server.log").read_text()
    # uvicorn's access log (vLLM's default): one request per step; the start-up route list also
    # names /v1/completions, so only request lines count
    requests = re.findall(r'"POST /v1/completions HTTP', log)
    assert len(requests) >= 2, "the trainer did not ask the server for completions at every step"


@needs_two
def test_zero2_dp2_checkpoint_is_deepspeed_s_files_and_exports(tmp_path: Path) -> None:
    """Written on CPU (tests/slow/test_deepspeed_prefetch_resume.py), here with bf16 on two
    GPUs: a full-parameter ZeRO-2 checkpoint holds DeepSpeed's files alone, no
    model.safetensors (runtime/rank/checkpoints/deepspeed_save.py), and ``hpc-grpo export`` writes a
    checked model folder from them."""
    run_dir = _run(_site(tmp_path, 2), "--tp", "1", "--zero-stage", "2", "--set=save_steps=2")
    ckpt = run_dir / "checkpoints" / "checkpoint-2"
    names = {p.name for p in ckpt.iterdir()}
    assert "latest" in names and "model.safetensors" not in names, names
    shards = {p.name for p in ckpt.glob("global_step*/*")}
    assert "mp_rank_00_model_states.pt" in shards, shards
    assert sum("optim_states" in n for n in shards) == 2, shards
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert "ZeRO-2 checkpoints hold DeepSpeed's files alone" in log
    assert "[checkpoint] checkpoint-2 saved in" in log
    state = json.loads((run_dir / "state.json").read_text())
    assert state["checkpoint_parts_s"]["model_files"] < 1.0, state["checkpoint_parts_s"]
    done = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", "export", str(run_dir)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "(zero layout, weights" in done.stderr, done.stderr[-3000:]
    assert (run_dir / "export" / "step-2" / "model.safetensors").is_file()
