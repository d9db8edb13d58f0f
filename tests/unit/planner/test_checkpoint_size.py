"""Checkpoints that fit (#15): the plan's size of a checkpoint against real saves, the refusal
and warnings at submit, what a save that fails for lack of space says, and the rank's skip."""

from __future__ import annotations

import errno
import gc
import json
import os
import subprocess
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.errors import UserError
from hpc_grpo.planner import dense_arch
from hpc_grpo.planner.checkpoint_size import (
    CheckpointRequest,
    disk_verdict,
    host_verdict,
    size_checkpoint,
)
from hpc_grpo.preflight import inputs
from hpc_grpo.runtime.rank.checkpoints import folders
from tests.paths import RESULTS
from tests.unit.planner.checkpoint_size_helpers import _request
from tests.unit.planner.checkpoint_size_helpers import tiny_home as tiny_home  # noqa: F401, F811 (a fixture)

TINY = json.loads((RESULTS / "2026-11-24-ckpt-tiny-cpu.json").read_text())
H200 = json.loads((RESULTS / "2026-11-24-ckpt-1.5b-reference-h200.json").read_text())
BIG_FILES = (".safetensors", ".pt", ".bin")  # weights and optimizer states, not the small files


def _tiny(zero: int) -> CheckpointRequest:
    return CheckpointRequest(num_params=TINY["num_params"], trainable_params=TINY["num_params"],
                             zero_stage=zero, offload_optimizer=False, lora=False, device="cpu",
                             world_size=TINY["world_size"], save_total_limit=1)


@pytest.mark.parametrize("zero", [0, 2, 3])
def test_estimate_matches_the_tiny_models_real_saves(zero: int) -> None:
    files = TINY["layouts"][f"zero{zero}"]
    measured = sum(size for name, size in files.items()
                   if name.endswith(BIG_FILES) and "training_args" not in name)
    size = size_checkpoint(_tiny(zero))
    planned = sum(b for name, b in size.items if not name.startswith("scheduler"))
    assert abs(planned - measured) <= 0.03 * measured, (zero, planned, measured, files)


def test_estimate_matches_a_1_5b_save_on_an_h200() -> None:
    """The whole checkpoint of the GPU run (ZeRO off, fp32 master weights): within 1%."""
    assert abs(H200["checkpoint_bytes_planned"] - H200["checkpoint_bytes_measured"]) \
        <= 0.01 * H200["checkpoint_bytes_measured"]


def test_full_7b_needs_12_bytes_a_parameter_and_cannot_fit_64_gib() -> None:
    arch = dense_arch("7b", hidden_size=3584, num_layers=28, num_attention_heads=28,
                      num_kv_heads=4, intermediate_size=18944, vocab_size=32768,
                      tie_word_embeddings=False, max_position_embeddings=4096, qkv_bias=True)
    for zero, offload in ((0, False), (3, True), (2, False)):
        size = size_checkpoint(CheckpointRequest(arch.num_params, arch.num_params, zero, offload, False,
                                          "cuda", 1, 1))
        assert size.one >= 12 * arch.num_params
        problem, _ = disk_verdict(size, 64 * 2**30, "the disk")
        assert "no save can complete" in problem
    assert H200["memory_plan"]["zero_stage"] == 0


def test_a_lora_checkpoint_holds_its_adapter_and_a_full_one_deepspeed_s_files_alone() -> None:
    full = CheckpointRequest(10**9, 10**9, 3, False, False, "cuda", 8, 1)
    assert dict(size_checkpoint(full).items)["model weights (safetensors)"] == 0
    assert dict(size_checkpoint(full).items)["DeepSpeed optimizer (fp32 master, m, v)"] == 12 * 10**9
    lora = CheckpointRequest(10**9, 10**7, 3, False, True, "cuda", 8, 1)
    assert dict(size_checkpoint(lora).items)["model weights (safetensors)"] == 2 * 10**7  # adapter


def test_kept_checkpoints_warn_with_the_limit_that_fits() -> None:
    size = size_checkpoint(_tiny(0))
    one = size.one
    problem, warning = disk_verdict(size, int(one * 1.5), "fs")
    assert not problem and "later saves will be skipped" in warning
    assert "free space first" in warning  # one fits, not one plus the next
    problem, warning = disk_verdict(size, one * 10, "fs")
    assert (problem, warning) == ("", "")
    unbounded = size_checkpoint(CheckpointRequest(10**6, 10**6, 0, False, False, "cpu", 1, None))
    assert "all kept" in disk_verdict(unbounded, 10**12, "fs")[1]


def test_host_memory_of_a_save_warns_over_the_node() -> None:
    zero3 = size_checkpoint(CheckpointRequest(7 * 10**9, 7 * 10**9, 3, False, False, "cuda", 8, 1))
    assert zero3.host_bytes == 0  # no gathered model file (pinned copies: checked at each save)
    zero2 = size_checkpoint(CheckpointRequest(7 * 10**9, 7 * 10**9, 2, False, False, "cuda", 8, 1))
    assert zero2.host_bytes == 0 and dict(zero2.items)["model weights (safetensors)"] == 0
    big = size_checkpoint(CheckpointRequest(7 * 10**9, 7 * 10**9, 0, False, False, "cuda", 1, 1,
                                            weight_bytes=2))  # ZeRO off: the model file, bf16
    assert big.host_bytes == 5 * 10**9  # safetensors builds one 5 GB shard in memory
    assert "host memory" in host_verdict(big, 100.0, 104)
    assert host_verdict(big, 10.0, 512) == ""


def test_submit_refuses_when_no_checkpoint_fits(tiny_home: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "free_space", lambda root: (100_000, "the output file system (x)"))
    with pytest.raises(UserError, match=r"one checkpoint needs [0-9.]+ MiB but the output file system"):
        api.submit(_request(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    prepared = api.prepare(_request(tmp_path / "runs"))  # plan and render show it, not refuse
    assert any("submit refuses this" in w for w in prepared.plan.warnings)


def test_free_space_probe_reads_the_nearest_existing_parent(tmp_path: Path) -> None:
    free, where = inputs.free_space(tmp_path / "not" / "yet" / "there")
    assert free is not None and free > 0 and str(tmp_path) in where


def test_disk_full_is_named_from_errno_and_from_torchs_writer() -> None:
    enospc = OSError(errno.ENOSPC, "No space left on device", "/x/optimizer.pt")
    assert folders.disk_full_message(enospc, None).startswith("disk full: No space left")
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = enospc
    assert folders.disk_full_message(wrapped, None).startswith("disk full")
    torch_text = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 123 vs 45")
    assert folders.disk_full_message(torch_text, 10 * 2**20).startswith("disk full")
    assert folders.disk_full_message(torch_text, 100 * 2**30) == ""  # not a full disk
    assert folders.disk_full_message(ValueError("x"), 0) == ""


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_torch_save_onto_a_full_tmpfs_is_named_disk_full(tmp_path: Path) -> None:
    """A real full file system: torch.save of 4 MiB onto a 1 MiB tmpfs (root only)."""
    torch = pytest.importorskip("torch")
    mount = tmp_path / "small"
    if not _tmpfs(mount, "1m"):
        pytest.skip("mounting a tmpfs needs root")
    try:
        with pytest.raises(Exception) as caught:
            torch.save({"w": torch.zeros(2**20)}, mount / "optimizer.pt")
        message = folders.disk_full_message(caught.value, folders.free_bytes(mount))
        text = repr(caught.value)
        del caught  # its traceback holds the open file: the tmpfs would stay busy
        gc.collect()
        assert message.startswith("disk full"), text
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def test_next_save_needs_the_newest_checkpoints_measured_size(tmp_path: Path) -> None:
    out = tmp_path / "checkpoints"
    assert folders.bytes_needed(1234, out) == 1234  # no checkpoint yet: the plan's
    done = out / "checkpoint-4"
    done.mkdir(parents=True)
    (done / "optimizer.pt").write_bytes(b"x" * 5000)
    (done / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    folders.write_marker(done, 4, 1)
    half = out / "checkpoint-6"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"y" * 9000)
    assert folders.bytes_needed(1234, out) == folders.folder_bytes(done) > 5000
    assert folders.remove_incomplete(out) == [half] and not half.exists() and done.exists()
    line = folders.skip_line(8, 3 * 2**30, 2**30, out)
    assert "step 8 skipped" in line and "3.0 GiB" in line and "1.0 GiB are free" in line
