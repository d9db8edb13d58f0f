"""Export on a GPU (issue #28): the folders vLLM loads, checked against the checkpoints' models.

Marked ``gpu``. Each test exports a checkpoint another GPU test left, with ``hpc-grpo export``
on this machine (the local site: the export runs here, not as a job), in bf16; the export's
check reads the folder with transformers (fp32 arithmetic, on the GPU) and with vLLM (bf16,
``runtime/posttrain/vllm_check.py``), each against the checkpoint's own model, and both must
pass. Run with the same ``HPC_GRPO_RESULTS`` and ``HPC_GRPO_WORK`` as the test that left it:

- ``-k zero3``: after ``tests/gpu/test_memory_phases.py -k "offload and 1.5b-2rank"`` (1.5B,
  ZeRO-3 + optimizer offload, two ranks: DeepSpeed's shards only, no model file; on a one-GPU
  machine ``-k "offload and 1.5b-1rank"``, the same with one rank); then ``hpc-grpo eval`` of
  the run (its export) on the run's dataset, generated through vLLM, and of the checkpoint
  itself (``--step``) through transformers, which reads the shards without an export.
- ``-k lora``: after ``tests/gpu/test_lora_7b.py -k lora_reference`` (7B, LoRA on one GPU):
  the run's final adapter merged into the base.
Each export folder is deleted at the end (the 7B's is 15 GB).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.checkpoint_resume_helpers import _cli, _folder_bytes, _work, eval_result
from tests.gpu.gpu_helpers import needs_gpu
from tests.gpu.multinode_helpers import _save, _saved

pytestmark = pytest.mark.gpu


def _export(run_dir: Path, name: str, *extra: str) -> dict[str, Any]:
    target = _work("exports") / name
    shutil.rmtree(target, ignore_errors=True)
    started = time.time()
    proc = _cli("export", str(run_dir), "--to", str(target), "--dtype", "bf16", *extra)
    entries = [json.loads(x) for x in (run_dir / "exports.jsonl").read_text().splitlines()] \
        if (run_dir / "exports.jsonl").exists() else []
    return {"exit": proc.returncode, "wall_s": round(time.time() - started, 1),
            "target": str(target), "bytes": _folder_bytes(target) if target.exists() else 0,
            "files": sorted(p.name for p in target.iterdir()) if target.exists() else [],
            "entry": entries[-1] if entries else None,
            "stdout_tail": proc.stdout[-2000:], "stderr_tail": proc.stderr[-3000:]}


def _assert_checked(result: dict[str, Any]) -> None:
    assert result["exit"] == 0, result["stdout_tail"] + result["stderr_tail"]
    check = result["entry"]["check"]
    assert check["passed"] is True and check["engine"] == "transformers (GPU)", check
    by_vllm = check["vllm"]
    assert by_vllm.get("passed") is True and by_vllm["engine"].startswith("vLLM"), by_vllm
    assert by_vllm["tokens"] == check["tokens"] > 0, check
    assert "model.safetensors.index.json" in result["files"] or "model.safetensors" in result["files"]


@needs_gpu
def test_zero3_offload_export_read_by_vllm_then_eval_through_vllm() -> None:
    kept = [s for s in map(_saved, ("memory-offload-1.5b-2ranks", "memory-offload-1.5b"))
            if s and any(Path(s["run_dir"]).glob("checkpoints/checkpoint-*"))]
    assert kept, ('run tests/gpu/test_memory_phases.py -k "offload and 1.5b-2rank" first (on a '
                  'one-GPU machine -k "offload and 1.5b-1rank"): it keeps its checkpoint')
    saved = kept[0]
    run_dir = Path(saved["run_dir"])
    shards = sorted(p.name for p in run_dir.glob("checkpoints/checkpoint-*/*"))
    steps = sorted(int(p.name.split("-")[1]) for p in run_dir.glob("checkpoints/checkpoint-*"))
    result = {"source": saved["deepspeed"], "ranks": saved.get("ranks"),
              "checkpoint_files": shards, "export": _export(run_dir, "zero3-1.5b")}
    result["eval"] = eval_result(run_dir, "--limit", "32", "--num-samples", "4")
    result["eval_shards"] = eval_result(run_dir, "--step", str(steps[-1]), "--engine", "transformers",
                                        "--limit", "8", "--num-samples", "1", "--max-new-tokens", "32")
    _save("export-zero3-offload-1.5b" + ("-1rank" if saved.get("ranks") == 1 else ""), result)
    shutil.rmtree(result["export"]["target"], ignore_errors=True)
    assert not any(name == "model.safetensors" for name in shards), shards  # shards only
    _assert_checked(result["export"])
    for key, engine, prompts in (("eval", "vllm", 32), ("eval_shards", "transformers", 8)):
        run = result[key]
        assert run["exit"] == 0, run["stderr_tail"]
        assert run["record"]["engine"] == engine and run["record"]["prompts"] == prompts, run
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # kept for another try otherwise


@needs_gpu
def test_lora_7b_merged_export_read_by_vllm() -> None:
    saved = _saved("7b-lora-resume-reference")
    assert saved, "run tests/gpu/test_lora_7b.py -k lora_reference first"
    run_dir = Path(saved["run_dir"])
    result = {"export": _export(run_dir, "lora-7b-merged", "--merge-lora")}
    _save("export-lora-7b-merged", result)
    shutil.rmtree(result["export"]["target"], ignore_errors=True)
    _assert_checked(result["export"])
    entry = result["export"]["entry"]
    assert entry["mode"] == "merged" and entry["check"]["rounding"]["merge"]["passed"], entry
