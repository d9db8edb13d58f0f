"""A GPU workstation as a new user meets it (issue #58): ``site init`` writes the profile from
the machine, then submit, a cancel mid-run, resume, export and eval, all through the CLI on
the local site, and the README's first job on the shipped ``local`` profile.

Marked ``gpu``. On the lent machine (docs/gpu.md), with ``HPC_GRPO_RESULTS`` and
``HPC_GRPO_WORK`` kept in /tmp between calls on the warm machine, in this order:

- ``-k reference``: ``site init ws --local`` (the profile's GPU count and memory are what CUDA
  reports here), ``plan`` on it, and an uninterrupted 8-step run of the 0.5B shape;
- ``-k cancel_resume``: the same run cancelled after step 3 (``hpc-grpo cancel``: the ranks
  save at the step end), then ``resume --wait``: every step equals the reference's;
- ``-k export_eval``: the resumed run exported (checked by transformers and vLLM) and
  evaluated through vLLM and through transformers;
- ``-k learns``: the issue's shape (0.5B, 16 prompts x 8 generations x 192 tokens on one GPU)
  planned, run for 10 steps, and planned again: the second plan goes by the measured step time;
- ``-k cpu_profile``: a profile of 0 GPUs on this machine: the plan says it trains on the CPU
  although GPUs are here, and its 4 steps train on the CPU (the ranks see no GPU);
- ``-k readme``: the README's first command on this machine with the shipped profile, and the
  README's ``eval --step 100`` through both engines (the README quotes transformers on CPU).
Each saves its figures as ``workstation-*.json`` for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gpu.checkpoint_resume_helpers import _cli, _metrics, _work, eval_result
from tests.gpu.gpu_helpers import machine, needs_gpu
from tests.gpu.lora_7b_helpers import LOSS_RTOL
from tests.gpu.multinode_helpers import _save, _saved
from tests.paths import REPO

pytestmark = pytest.mark.gpu

SETS = ("--set=max_steps=8", "--set=save_steps=4", "--set=per_device_train_batch_size=8",
        "--set=num_generations=8", "--set=max_completion_length=64", "--set=seed=7")
MODEL = "builtin:qwen2-0.5b"


def _profile() -> Path:
    return _work("ws") / "ws.yaml"


def _submit(name: str, *extra: str) -> tuple[Any, Path, float]:
    started = time.time()
    proc = _cli("submit", "--site", str(_profile()), "--model", MODEL, "--run-id", name,
                "--output-root", str(_work("ws") / "runs"), *SETS, *extra)
    match = re.search(r"dir (\S+)", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-3000:]  # submitted; --wait's exit: callers
    return proc, Path(match.group(1)), started


def _log_tails(run_dir: Path) -> dict[str, str]:
    """The last lines of every log under the run directory (what a failed call brings back)."""
    return {str(p.relative_to(run_dir)): p.read_text(errors="replace")[-3000:]
            for p in sorted(run_dir.rglob("*.log"))[:12] if p.is_file()}


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: row[k] for k in ("step", "reward_mean", "reward_std", "loss")}
            for row in _metrics(run_dir)]


@needs_gpu
def test_reference_site_init_plan_and_an_uninterrupted_run() -> None:
    shutil.rmtree(_work("ws"), ignore_errors=True)
    proc = _cli("site", "init", "ws", "--local", "--output", str(_profile()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import torch

    profile = yaml.safe_load(_profile().read_text())
    gpu_gib, host_gib = machine()
    assert profile["scheduler"] == "local"
    assert profile["gpus_per_node"] == torch.cuda.device_count(), profile
    assert abs(profile["gpu_memory_gib"] - gpu_gib) <= 2, (profile, gpu_gib)
    assert profile["cpu_memory_gib"] <= host_gib + 1, (profile, host_gib)
    plan = _cli("plan", "--site", str(_profile()), "--model", MODEL, *SETS, "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = json.loads(plan.stdout)
    assert (planned["device"], planned["world_size"]) == ("cuda", torch.cuda.device_count()), planned
    submitted, run_dir, started = _submit("ws-reference", "--wait")
    wall = time.time() - started
    rows = _rows(run_dir)
    _save("workstation-reference", {"profile": profile, "plan_stdout": plan.stdout[-4000:],
                                    "run_dir": str(run_dir), "wall_s": round(wall, 1),
                                    "metrics": rows, "site_init_stdout": proc.stdout[-2000:],
                                    "submit_tail": submitted.stdout[-1500:] + submitted.stderr[-1500:],
                                    "logs": _log_tails(run_dir) if len(rows) < 8 else {}})
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    assert [r["step"] for r in rows] == list(range(1, 9)), rows
    record = json.loads((run_dir / "run.json").read_text())
    assert record["vllm"]["enabled"] and record["vllm"]["mode"] == "colocate", record["vllm"]


@needs_gpu
def test_cancel_resume_equals_the_reference() -> None:
    ref = _saved("workstation-reference")
    assert ref, "run -k reference first (same HPC_GRPO_RESULTS and HPC_GRPO_WORK)"
    shutil.rmtree(_work("ws") / "runs" / "ws-stopped", ignore_errors=True)
    submitted, run_dir, started = _submit("ws-stopped", "--no-wait")
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    while len(_metrics(run_dir)) < 3:
        assert time.time() - started < 300, "no third step in 300 s"
        time.sleep(0.5)
    cancel = _cli("cancel", str(run_dir))
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    cancelled_at = len(_metrics(run_dir))
    while not json.loads(_cli("status", str(run_dir), "--json").stdout)[0]["finished"]:
        assert time.time() - started < 420, "the cancelled run did not end in 420 s"
        time.sleep(1)
    status = _cli("status", str(run_dir))
    saved = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    resumed_at = time.time()
    resume = _cli("resume", str(run_dir), "--wait")
    rows = _rows(run_dir)
    _save("workstation-cancel-resume", {
        "run_dir": str(run_dir), "cancelled_after_rows": cancelled_at, "checkpoints": saved,
        "status_after_cancel": status.stdout[-2000:], "resume_wall_s": round(time.time() - resumed_at, 1),
        "resume_exit": resume.returncode, "metrics": rows, "reference": ref["metrics"],
        "resume_tail": resume.stdout[-1500:] + resume.stderr[-1500:],
        "logs": _log_tails(run_dir) if resume.returncode else {}})
    assert "CANCELLED" in status.stdout, status.stdout
    assert saved and saved[-1] >= 3, saved
    assert resume.returncode == 0, resume.stdout[-3000:] + resume.stderr[-3000:]
    assert [r["step"] for r in rows] == list(range(1, 9)), rows
    for ours, theirs in zip(rows, ref["metrics"], strict=True):
        same = ("reward_mean", "reward_std")
        assert [ours[k] for k in same] == [theirs[k] for k in same], (ours, theirs)
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=LOSS_RTOL, abs=1e-6), (ours, theirs)


def _eval(target: str, *args: str) -> dict[str, Any]:
    """The eval's saved result without its per-prompt rewards (the docs quote the means)."""
    result = eval_result(target, *args)
    result["record"].pop("per_prompt", None)
    return result


@needs_gpu
def test_export_eval_of_the_resumed_run() -> None:
    resumed = _saved("workstation-cancel-resume")
    assert resumed, "run -k cancel_resume first"
    run_dir = Path(resumed["run_dir"])
    target = _work("ws") / "export"
    shutil.rmtree(target, ignore_errors=True)
    started = time.time()
    export = _cli("export", str(run_dir), "--to", str(target))
    export_s = time.time() - started
    entries = [json.loads(x) for x in (run_dir / "exports.jsonl").read_text().splitlines()] \
        if (run_dir / "exports.jsonl").exists() else []
    result: dict[str, Any] = {"export_exit": export.returncode, "export_wall_s": round(export_s, 1),
              "export_entry": entries[-1] if entries else None,
              "export_tail": export.stdout[-2000:] + export.stderr[-2000:],
              "eval_vllm": _eval(str(run_dir), "--engine", "vllm"),
              "eval_transformers": _eval(str(run_dir), "--engine", "transformers")}
    _save("workstation-export-eval", result)
    assert export.returncode == 0, result["export_tail"]
    check = result["export_entry"]["check"]
    assert check["passed"] is True and check["vllm"].get("passed") is True, check
    for key, engine in (("eval_vllm", "vllm"), ("eval_transformers", "transformers")):
        run = result[key]
        assert run["exit"] == 0, run["stderr_tail"]
        assert run["record"]["engine"] == engine, run["record"]
    shutil.rmtree(target, ignore_errors=True)


@needs_gpu
def test_readme_first_job_on_the_shipped_local_profile() -> None:
    """The README's first command, as written, on a GPU box; then its ``eval --step 100``."""
    root = _work("readme")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    plan = _cli("plan", "--site", "local", "--recipe", str(REPO / "recipes" / "tiny-cpu.yaml"))
    started = time.time()
    proc = _cli("submit", "--site", "local", "--recipe", str(REPO / "recipes" / "tiny-cpu.yaml"),
                "--output-root", str(root), "--wait")
    wall = time.time() - started
    match = re.search(r"dir (\S+)", proc.stdout)
    run_dir = Path(match.group(1)) if match else root
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    result: dict[str, Any] = {"plan_stdout": plan.stdout[-3000:], "plan_stderr": plan.stderr[-2000:],
              "submit_exit": proc.returncode, "wall_s": round(wall, 1), "summary": summary,
              "submit_tail": proc.stdout[-2000:] + proc.stderr[-2000:],
              "logs": _log_tails(run_dir) if proc.returncode else {}}
    if proc.returncode == 0:
        for engine in ("transformers", "vllm"):
            result[f"eval_step100_{engine}"] = _eval(str(run_dir), "--step", "100", "--engine", engine)
    _save("workstation-readme-first-job", result)
    assert proc.returncode == 0, result["submit_tail"]
    assert summary["steps"] == 100 and summary["reward_delta"] > 10, summary
    for engine in ("transformers", "vllm"):
        assert result[f"eval_step100_{engine}"]["exit"] == 0, result[f"eval_step100_{engine}"]


SHAPE = ("--set=max_steps=10", "--set=save_steps=1000", "--set=per_device_train_batch_size=128",
         "--set=num_generations=8", "--set=max_completion_length=192", "--set=seed=7")


@needs_gpu
def test_the_second_plan_of_a_shape_learns_its_measured_step_time() -> None:
    """#58: the plan predicted 0.91 s/step for this shape where a user measured 0.61-0.65."""
    if not _profile().exists():
        assert _cli("site", "init", "ws", "--local", "--output", str(_profile())).returncode == 0
    job = ("--site", str(_profile()), "--model", MODEL, *SHAPE)
    before = json.loads(_cli("plan", *job, "--json").stdout)["step_time"]
    shutil.rmtree(_work("ws") / "runs" / "ws-shape", ignore_errors=True)
    proc = _cli("submit", *job, "--run-id", "ws-shape", "--output-root",
                str(_work("ws") / "runs"), "--wait")
    match = re.search(r"dir (\S+)", proc.stdout)
    run_dir = Path(match.group(1)) if match else _work("ws")
    row = json.loads(_cli("status", str(run_dir), "--json").stdout)[0] if match else {}
    after = _cli("plan", *job)
    learnt = json.loads(_cli("plan", *job, "--json").stdout)["step_time"]
    _save("workstation-step-time", {
        "before": before, "after": learnt, "status_step_s": row.get("step_s"),
        "status_step_s_predicted": row.get("step_s_predicted"), "metrics": _rows(run_dir),
        "plan_lines": [ln for ln in after.stdout.splitlines() if ln.startswith("step time")],
        "submit_tail": proc.stdout[-1500:] + proc.stderr[-1500:],
        "logs": _log_tails(run_dir) if proc.returncode else {}})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert before["source"] == "predicted", before
    assert (learnt["source"], learnt["measured_by"]) == ("measured", "ws-shape"), learnt
    assert learnt["s_per_step"] == round(row["step_s"], 3), (learnt, row)
    assert any("measured on this site by run ws-shape" in ln for ln in after.stdout.splitlines())


@needs_gpu
def test_a_cpu_profile_on_a_gpu_machine_trains_on_the_cpu() -> None:
    """#58: a local profile that says 0 GPUs on a GPU box (main's README job failed there before
    its first step, on the CPU path, in session 51's first call)."""
    root = _work("cpu-profile")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    profile = root / "cpu.yaml"
    profile.write_text("scheduler: local\ngpus_per_node: 0\ncpus_per_node: 4\nprocs_per_node: 2\n"
                       f"output_root: {root / 'runs'}\nenv:\n  OMP_NUM_THREADS: \"1\"\n")
    job = ("--site", str(profile), "--recipe", str(REPO / "recipes" / "tiny-cpu.yaml"),
           "--set", "max_steps=4")
    plan = _cli("plan", *job)
    proc = _cli("submit", *job, "--wait")
    match = re.search(r"dir (\S+)", proc.stdout)
    run_dir = Path(match.group(1)) if match else root
    record = json.loads((run_dir / "run.json").read_text()) if match else {}
    _save("workstation-cpu-profile", {
        "plan_stdout": plan.stdout[-3000:], "submit_exit": proc.returncode,
        "device": record.get("device"), "metrics": _rows(run_dir),
        "submit_tail": proc.stdout[-2000:] + proc.stderr[-2000:],
        "logs": _log_tails(run_dir) if proc.returncode else {}})
    said = plan.stdout + plan.stderr
    assert plan.returncode == 0 and "trains on the CPU although this machine has" in said, said
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert record["device"] == "cpu" and [r["step"] for r in _rows(run_dir)] == [1, 2, 3, 4]
