"""checkpoints/universal.py: a ZeRO checkpoint saved by another world size is converted by
ds_to_universal once (its command line, the marker after success only, the folder reused, a
half-done one redone, a failure as one line) and this job's DeepSpeed config loads universally."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hpc_grpo.rundir import reshard
from hpc_grpo.rundir.checkpoints import write_marker
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank.checkpoints import universal


def _run(world: int, zero: int | None, mode: str = "colocate") -> RunRecord:
    return RunRecord.from_dict({
        "schema": 1, "run_id": "r", "run_dir": "/runs/r", "model": "m", "seed": 42,
        "dataset": {"name": "builtin:digits", "prompt_column": "prompt", "split": "train"},
        "nodes": 1, "procs_per_node": world, "ranks": [], "device": "cpu",
        "grpo_config": {}, "vllm": {"mode": mode},
        "deepspeed": {"zero_stage": zero} if zero else None})


def _checkpoint(tmp_path: Path, saved_by: int, tag: bool = True) -> Path:
    checkpoint = tmp_path / "checkpoint-3"
    (checkpoint / "global_step3").mkdir(parents=True)
    if tag:
        (checkpoint / "latest").write_text("global_step3\n")
    write_marker(checkpoint, 3, saved_by)
    return checkpoint


def test_only_a_zero_checkpoint_of_another_size_is_converted(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, saved_by=2)
    conversion = universal.plan(_run(1, 2), checkpoint)
    assert conversion == universal.Conversion(checkpoint, "global_step3", 2, 2, 1)
    assert conversion.line() == "ZeRO-2 shards converted from 2 to 1 ranks"
    assert universal.plan(_run(2, 2), checkpoint) is None  # the saving size
    assert universal.plan(_run(1, None), checkpoint) is None  # DDP
    assert universal.plan(_run(1, 2), None) is None  # from scratch


def test_a_layout_the_rule_refuses_or_no_tag_fails_on_every_rank(tmp_path: Path) -> None:
    with pytest.raises(universal.ConversionError, match="server mode is not resized"):
        universal.plan(_run(1, 2, mode="server"), _checkpoint(tmp_path / "a", saved_by=2))
    with pytest.raises(universal.ConversionError, match="no DeepSpeed tag folder"):
        universal.plan(_run(1, 3), _checkpoint(tmp_path / "b", saved_by=2, tag=False))


def test_the_command_converts_the_tag_beside_itself_with_the_client_state_injected(
        tmp_path: Path) -> None:
    conversion = universal.Conversion(tmp_path, "global_step3", 2, 4, 2)
    argv = universal.command(conversion, python="py")
    assert argv[:3] == ["py", "-m", "deepspeed.checkpoint.ds_to_universal"]
    assert argv[argv.index("--input_folder") + 1] == str(tmp_path / "global_step3")
    assert argv[argv.index("--output_folder") + 1] == str(tmp_path / "global_step3_universal")
    assert "--inject_missing_state" in argv


class FakeConverter:
    """Writes what ds_to_universal writes (the folder, then latest_universal), or fails."""

    def __init__(self, code: int = 0) -> None:
        self.code, self.calls = code, 0

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls += 1
        out = Path(argv[argv.index("--output_folder") + 1])
        (out / "zero").mkdir(parents=True)
        if self.code == 0:
            (out.parent / reshard.LATEST_UNIVERSAL).write_text(out.name)
        return subprocess.CompletedProcess(argv, self.code, "*** Done!\n" if not self.code else "",
                                           "AssertionError: shapes differ\n" if self.code else "")


def test_converted_once_then_reused(tmp_path: Path) -> None:
    conversion = universal.plan(_run(2, 2), _checkpoint(tmp_path, saved_by=4))
    assert conversion is not None
    fake = FakeConverter()
    line = universal.convert(conversion, fake)
    assert line.startswith("ZeRO-2 shards converted from 4 to 2 ranks: "
                           "checkpoint-3/global_step3_universal in ")
    assert reshard.converted(conversion.checkpoint, "global_step3")
    again = universal.convert(conversion, fake)
    assert fake.calls == 1  # the second resume converts nothing
    assert again == ("ZeRO-2 shards converted from 4 to 2 ranks: reused "
                     "checkpoint-3/global_step3_universal")


def test_a_half_done_conversion_is_redone(tmp_path: Path) -> None:
    conversion = universal.plan(_run(2, 3), _checkpoint(tmp_path, saved_by=4))
    assert conversion is not None
    (conversion.folder / "tmp").mkdir(parents=True)  # killed while extracting
    fake = FakeConverter()
    line = universal.convert(conversion, fake)
    assert fake.calls == 1 and line.endswith(", an unfinished one removed first")
    assert not (conversion.folder / "tmp").exists()
    assert reshard.converted(conversion.checkpoint, "global_step3")


def test_a_failed_conversion_is_one_line_and_not_marked(tmp_path: Path) -> None:
    conversion = universal.plan(_run(2, 2), _checkpoint(tmp_path, saved_by=4))
    assert conversion is not None
    with pytest.raises(universal.ConversionError) as caught:
        universal.convert(conversion, FakeConverter(code=1))
    assert str(caught.value) == ("ds_to_universal on checkpoint-3/global_step3_universal exited "
                                 "1: AssertionError: shapes differ")
    assert not reshard.converted(conversion.checkpoint, "global_step3")
    fake = FakeConverter()  # the next attempt converts again
    universal.convert(conversion, fake)
    assert fake.calls == 1


def test_no_conversion_is_no_collective() -> None:
    assert universal.prepare(None, rank=1) is None  # torch.distributed never touched


def test_the_jobs_deepspeed_config_loads_universally() -> None:
    config: dict[str, Any] = {"zero_optimization": {"stage": 2}}
    args = SimpleNamespace(hf_deepspeed_config=SimpleNamespace(config=config))
    universal.load_universal(args)
    assert config == {"zero_optimization": {"stage": 2}, "checkpoint": {"load_universal": True}}


def test_each_group_gets_its_own_step_count() -> None:
    """DeepSpeed's ZeRO-3 universal load hands every group one step tensor; Adam adds 1 to it
    in place once per group."""
    import torch

    shared = torch.tensor(2.0)
    state: dict[Any, Any] = {"decay": {"step": shared}, "no_decay": {"step": shared},
                             "third": {"step": shared}, "no_step": {"exp_avg": 0}}
    assert universal.unshare_steps(state) == 2
    for entry in ("decay", "no_decay", "third"):
        state[entry]["step"] += 1  # what torch's Adam does, per group
    assert [float(state[k]["step"]) for k in ("decay", "no_decay", "third")] == [3.0, 3.0, 3.0]
    assert universal.unshare_steps(state) == 0  # own tensors already


def test_the_repair_finds_the_torch_optimizer_and_only_after_a_universal_load() -> None:
    torch_optimizer = SimpleNamespace(state={})
    wrapped = SimpleNamespace(optimizer=SimpleNamespace(optimizer=torch_optimizer))
    assert universal.innermost(wrapped) is torch_optimizer
    universal_args = SimpleNamespace(hf_deepspeed_config=SimpleNamespace(
        config={"checkpoint": {"load_universal": True}}))
    assert universal.loads_universal(universal_args)
    assert not universal.loads_universal(SimpleNamespace(hf_deepspeed_config=None))
    assert not universal.loads_universal(SimpleNamespace(
        hf_deepspeed_config=SimpleNamespace(config={"zero_optimization": {"stage": 3}})))
