"""The checkpoint prefetch (runtime/rank/checkpoints/prefetch.py) on a real DeepSpeed resume: a
ZeRO-2 run on CPU (1 node x 2 processes, gloo) stopped at step 3 and resumed reads its files
ahead while the trainer is built, picks exactly the files DeepSpeed 0.19 wrote for each rank,
and still logs the same rewards and losses as an uninterrupted run at every step, from
checkpoints of DeepSpeed's files alone (no model.safetensors: runtime/rank/checkpoints/deepspeed_save.py),
which ``hpc-grpo export`` turns into the weights DeepSpeed's own zero_to_fp32.py gives. Written on
the GPU's ZeRO-2 layout (session 39); here on another device, with two ranks of one node
sharing the module-states file (read ahead by the first only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpc_grpo.runtime.rank.checkpoints import prefetch as checkpoint_prefetch
from tests.slow.resume_runs import counting_prompts, run_with_stops, step_rows, within_rounding
from tests.slow.runtime_slow_helpers import write_run

pytestmark = pytest.mark.slow
STEPS, STOP = 5, 3
REWARD = "tests.slow.resume_reward:prompt_length_recording"
ZERO2 = {"zero_stage": 2, "offload_optimizer": False, "overlap_comm": False,
         "contiguous_gradients": True}
LINE = re.compile(r"\[checkpoint\] checkpoint prefetch: ([\d.]+) of ([\d.]+) GiB in (\d+) file\(s\)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(uninterrupted run, run stopped at STOP and resumed)."""
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("prefetch")
    model = build_tiny_model(root / "model", seed=0)
    dataset = counting_prompts(root / "prompts.jsonl", 8)
    out = []
    for name, stops in (("reference", ()), ("stopped", (STOP,))):
        run_dir = root / name
        write_run(run_dir, model, steps=STEPS, reward_funcs=[REWARD], dataset=dataset,
                  deepspeed=ZERO2)
        run_with_stops(run_dir, stops, STEPS, timeout=240)
        out.append(run_dir)
    return out[0], out[1]


def test_the_resume_equals_the_uninterrupted_run(runs: tuple[Path, Path]) -> None:
    reference, stopped = runs
    ref = step_rows(reference)
    assert [r[0] for r in ref] == list(range(1, STEPS + 1))
    assert step_rows(stopped) == ref


def test_each_rank_read_ahead_what_deepspeed_wrote_for_it(runs: tuple[Path, Path]) -> None:
    _, stopped = runs
    folder = checkpoint_prefetch.tag_folder(stopped / "checkpoints" / f"checkpoint-{STOP}")
    assert folder is not None
    names = sorted(p.name for p in folder.iterdir())
    for rank in (0, 1):
        picked = checkpoint_prefetch.rank_files(names, rank, first_on_node=rank == 0)
        # rank 0: the module states and its partition; rank 1: its partition alone
        assert len(picked) == 2 - rank and all(f"rank_{rank}_" in n for n in picked[-1:]), picked
        log = (stopped / "logs" / f"rank-{rank}.log").read_text()
        (found,) = LINE.findall(log)  # the resumed attempt only: a fresh start reads nothing
        assert int(found[2]) == len(picked) and found[0] == found[1], found
        # ended before train begin without an error: every picked file read whole
        assert "s before train begin" in log and "not read" not in log, log[-2000:]
        assert "deepspeed_shm_comm" not in log  # not built on CPU (rank/setup/process_group.py)
    # every file a rank's load reads is someone's: the partitions of both and the shared states
    read_by_someone = set(checkpoint_prefetch.rank_files(names, 0, True)) | set(
        checkpoint_prefetch.rank_files(names, 1, False))
    assert {n for n in names if n.endswith("states.pt")} == read_by_someone, names
    assert json.loads((stopped / "state.json").read_text())["phase"] == "done"


def test_the_start_up_record_splits_deepspeed_s_prepare_and_checkpoint_load(
        runs: tuple[Path, Path]) -> None:
    """prepare_parts_s (runtime/rank/observe/startup_times.py) under DeepSpeed: its engine from accelerate's
    prepare on every attempt, and transformers' deepspeed_load_checkpoint on the resume only
    (the CPU resume test, tests/slow/test_resume_epochs.py, has the loads without DeepSpeed)."""
    _, stopped = runs
    lines = [json.loads(x) for x in (stopped / "startup.jsonl").read_text().splitlines()]
    assert [line["resumed_from_step"] for line in lines] == [None, STOP]
    fresh, resumed = (line["prepare_parts_s"] for line in lines)
    assert set(fresh) == {"accelerate_prepare"}
    # transformers also calls _load_optimizer_and_scheduler, which returns at once under DeepSpeed
    assert set(resumed) == {"accelerate_prepare", "deepspeed_checkpoint_load", "optimizer_load"}
    # (a key is there only when the call was made; the tiny model's load rounds to 0.0 s)
    assert within_rounding(resumed, lines[1]["parts_s"]["prepare_and_load"])


def test_the_checkpoints_read_back_were_written_without_crc32s(runs: tuple[Path, Path]) -> None:
    """The resume above read files torch.save wrote without CRC-32s (runtime/rank/checkpoints/save_speed.py):
    DeepSpeed's partitions and module states, and transformers' RNG and scheduler files."""
    import zipfile

    _, stopped = runs
    folder = stopped / "checkpoints" / f"checkpoint-{STOP}"
    written = sorted(p for p in folder.rglob("*.pt*") if zipfile.is_zipfile(p))  # .pt, .pth
    assert any("optim_states" in p.name for p in written), written
    assert any(p.name.startswith("rng_state") for p in written), written
    for path in written:
        with zipfile.ZipFile(path) as archive:
            assert {i.CRC for i in archive.infolist() if i.file_size} == {0}, path.name
    log = (stopped / "logs" / "rank-0.log").read_text()
    assert log.count("checkpoints are written without a CRC-32 of every record") == 2  # attempts


SAVED = re.compile(r"\[checkpoint\] (checkpoint-\d+) saved in ([\d.]+) s on this rank: (.*)")


def test_every_save_is_split_by_part_on_every_rank(runs: tuple[Path, Path]) -> None:
    """runtime/rank/checkpoints/save_parts.py on real DeepSpeed saves: each rank logs each checkpoint's
    split, with DeepSpeed's write under ``optimizer``; rank 0's last one is in state.json and
    accounts for the measured checkpoint_seconds."""
    _, stopped = runs
    state = json.loads((stopped / "state.json").read_text())
    parts = state["checkpoint_parts_s"]
    assert set(parts) == {"before", "model_files", "optimizer", "rng", "rest_of_save",
                          "wait_for_ranks", "marker_and_retention"}, parts
    assert abs(sum(parts.values()) - state["checkpoint_seconds"]) < 0.25, (parts, state)
    written = sorted(p.name for p in (stopped / "checkpoints").iterdir() if p.is_dir())
    for rank in (0, 1):
        found = SAVED.findall((stopped / "logs" / f"rank-{rank}.log").read_text())
        assert f"checkpoint-{STOP}" in {name for name, _, _ in found}, found
        assert {name for name, _, _ in found} >= set(written), (found, written)
        for _, total, split in found:
            seconds = [float(x.rsplit(" ", 1)[1]) for x in split.split(", ")]
            assert abs(sum(seconds) - float(total)) < 0.05, split


def test_the_checkpoints_are_deepspeed_s_files_alone_and_export_as_zero_to_fp32_does(
        runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Written for ZeRO-3 (tests/slow/test_export_eval.py), here on ZeRO-2: the resume above
    had no model.safetensors to read, and the export of the resumed run's last checkpoint is
    DeepSpeed's fp32 master weights, as the zero_to_fp32.py copied into it writes them."""
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    for run in runs:
        for folder in (run / "checkpoints").glob("checkpoint-*"):
            assert (folder / "latest").exists() and not (folder / "model.safetensors").exists()
        assert "ZeRO-2 checkpoints hold DeepSpeed's files alone" in (
            run / "logs" / "rank-0.log").read_text()
    _, stopped = runs
    checkpoint = stopped / "checkpoints" / f"checkpoint-{STEPS}"
    reference = tmp_path / "zero_to_fp32"
    script = subprocess.run([sys.executable, str(checkpoint / "zero_to_fp32.py"), str(checkpoint),
                             str(reference)], capture_output=True, text=True, timeout=300)
    assert script.returncode == 0, script.stderr
    gathered = torch.load(reference / "pytorch_model.bin", weights_only=True)
    done = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", "export", str(stopped)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(zero layout, weights" in done.stderr, done.stderr
    exported = load_file(str(stopped / "export" / f"step-{STEPS}" / "model.safetensors"))
    assert exported and set(exported) <= set(gathered)
    for name, tensor in exported.items():
        assert tensor.equal(gathered[name].to(tensor.dtype)), name
