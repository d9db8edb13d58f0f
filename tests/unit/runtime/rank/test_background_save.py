"""Periodic checkpoints written in the background (runtime/rank/checkpoints/background_save.py):
what the libraries' torch.save and safetensors writes become inside a periodic save, the
writer's durability and failure, the host-memory bound, and which saves are periodic. The
marker's side and exact resumes run in tests/slow/test_runtime_slow.py."""

from __future__ import annotations

import io
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import safetensors.torch
import torch

from hpc_grpo.runtime.rank.checkpoints import background_save
from hpc_grpo.runtime.rank.checkpoints.background_save import MIN_DEFERRED_BYTES, Writer


def _big() -> dict[str, torch.Tensor]:
    """A state dict over MIN_DEFERRED_BYTES, with two views of one storage (ZeRO-1/2's flat
    buffer): the view's sharing must survive the trip through memory."""
    flat = torch.arange(MIN_DEFERRED_BYTES // 2, dtype=torch.float32)
    return {"flat": flat, "view": flat[10:20], "step": torch.tensor(7)}


def _writer(budget: int = 1 << 40) -> Writer:
    return Writer(lambda: budget)


def test_a_periodic_save_s_files_arrive_later_from_the_writer_with_the_same_values(
        tmp_path: Path) -> None:
    import transformers.modeling_utils as modeling_utils  # binds save_file under its own name

    writer = _writer()
    writer.delay_s = 0.3  # faults/slow_writes.py's knob: the file is not there at once
    writer.begin(2, tmp_path, time.time())
    state, original = _big(), torch.save
    with background_save.deferred_writes(writer):
        torch.save(state, tmp_path / "optimizer.pt")
        modeling_utils.safe_save_file({"w": torch.ones(MIN_DEFERRED_BYTES)},
                                      str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
        torch.save({"small": 1}, tmp_path / "scheduler.pt")  # under the bound: written at once
        assert (tmp_path / "scheduler.pt").exists()
        assert not (tmp_path / "optimizer.pt").exists()
    assert torch.save is original and modeling_utils.safe_save_file is safetensors.torch.save_file
    state["flat"].add_(1)  # training goes on: the file holds the step's state
    writer.seal()
    batch = writer.wait()
    assert batch is not None and batch.done.is_set() and batch.error == ""
    assert (batch.files, batch.written_now) == (2, 0)
    loaded = torch.load(tmp_path / "optimizer.pt", weights_only=True)
    assert torch.equal(loaded["flat"], torch.arange(MIN_DEFERRED_BYTES // 2, dtype=torch.float32))
    loaded["flat"][10] = -1.0
    assert loaded["view"][0] == -1.0  # still a view of the same storage
    weights = safetensors.torch.load_file(tmp_path / "model.safetensors")
    assert torch.equal(weights["w"], torch.ones(MIN_DEFERRED_BYTES))


def test_outside_a_save_and_to_a_file_object_nothing_is_deferred(tmp_path: Path) -> None:
    writer = _writer()
    torch.save(_big(), tmp_path / "before.pt")  # no deferral installed
    assert (tmp_path / "before.pt").exists()
    writer.begin(2, tmp_path, time.time())
    buffer = io.BytesIO()
    with background_save.deferred_writes(writer):
        torch.save(_big(), buffer)
    assert buffer.getbuffer().nbytes > MIN_DEFERRED_BYTES and writer.batch is not None
    assert writer.batch.files == 0


def test_past_the_host_memory_budget_a_file_is_written_at_once(tmp_path: Path,
                                                               capsys: object) -> None:
    writer = _writer(budget=MIN_DEFERRED_BYTES * 3)
    writer.delay_s = 0.3
    writer.begin(4, tmp_path, time.time())
    with background_save.deferred_writes(writer):
        torch.save(_big(), tmp_path / "a.pt")  # 2 MiB + a little: held
        torch.save(_big(), tmp_path / "b.pt")  # would pass 3 MiB: written now
        assert (tmp_path / "b.pt").exists() and not (tmp_path / "a.pt").exists()
    writer.seal()
    batch = writer.wait()
    assert batch is not None and (batch.files, batch.written_now) == (1, 1)
    assert "written at once: the background writer holds at most" in capsys.readouterr().out  # type: ignore[attr-defined]


def test_a_failed_write_is_the_batch_s_error_and_ends_it(tmp_path: Path) -> None:
    writer = _writer()
    writer.begin(6, tmp_path, time.time())
    with background_save.deferred_writes(writer):
        torch.save(_big(), tmp_path / "gone" / "optimizer.pt")  # no such folder
    writer.seal()
    batch = writer.wait()
    assert batch is not None and batch.done.is_set()
    assert "optimizer.pt" in batch.error and "No such file" in batch.error


def test_one_batch_at_a_time(tmp_path: Path) -> None:
    writer = _writer()
    writer.delay_s = 0.3
    writer.begin(2, tmp_path, time.time())
    with background_save.deferred_writes(writer):
        torch.save(_big(), tmp_path / "x.pt")
    writer.seal()
    try:
        writer.begin(4, tmp_path, time.time())
    except RuntimeError as exc:
        assert "checkpoint-2's background write is in flight" in str(exc)
    else:
        raise AssertionError("a second batch began while the first was written")
    writer.wait()
    assert writer.begin(4, tmp_path, time.time()).step == 4


def test_only_saves_after_which_training_goes_on_are_periodic() -> None:
    def trainer(step: int, max_steps: int, stopping: bool) -> SimpleNamespace:
        return SimpleNamespace(state=SimpleNamespace(global_step=step, max_steps=max_steps),
                               control=SimpleNamespace(should_training_stop=stopping))

    assert background_save.periodic(trainer(4, 10, False))
    assert not background_save.periodic(trainer(10, 10, False))  # the last step's
    assert not background_save.periodic(trainer(4, 10, True))  # a stop's
    assert background_save.periodic(trainer(4, -1, False))  # epochs, no max_steps


def _marker_at(tmp_path: Path, step: int, writer: Writer) -> tuple[Any, Any, Any, Any, Path]:
    """A checkpoint marker callback with ``writer`` as its background writer, at ``step``."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from hpc_grpo.runtime.rank.checkpoints.marker import CheckpointMarkerCallback

    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    out = tmp_path / "checkpoints"
    marker = CheckpointMarkerCallback(run_dir)
    marker.background = writer
    args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.global_step = step
    return marker, args, state, control, out / f"checkpoint-{step}"


def test_a_failed_background_write_is_not_marked_and_its_folder_goes(tmp_path: Path) -> None:
    """A full disk (here: a file whose folder vanished) mid-write: never marked, the folder
    removed (its files would hold the room the next save needs), state.json says why, and
    training goes on (the marker's next step end has nothing pending)."""
    from hpc_grpo import rundir
    from hpc_grpo.runtime.rank.checkpoints import folders

    writer = _writer()
    marker, args, state, control, folder = _marker_at(tmp_path, 6, writer)
    folder.mkdir(parents=True)
    marker.on_step_end(args, state, control)
    writer.begin(6, folder, time.time())
    with background_save.deferred_writes(writer):
        torch.save(_big(), folder / "gone" / "optimizer.pt")
    marker.on_save(args, state, control)  # sealed, pending
    assert marker.pending is not None
    marker.settle()
    assert marker.pending is None and not folder.exists()
    assert not folders.is_complete(folder)
    skipped = rundir.load_state(tmp_path / "run").checkpoint_skipped or ""
    assert "checkpoint-6 not completed: its background write failed" in skipped


def test_a_stop_s_save_gives_the_write_in_flight_up(tmp_path: Path) -> None:
    """The stop's (or the last step's) save: the write in flight stops after its current file,
    is never marked, and the marker has nothing pending; the save that follows writes at once."""
    writer = _writer()
    writer.delay_s = 0.5
    marker, args, state, control, folder = _marker_at(tmp_path, 4, writer)
    folder.mkdir(parents=True)
    marker.on_step_end(args, state, control)
    writer.begin(4, folder, time.time())
    with background_save.deferred_writes(writer):
        for name in ("a.pt", "b.pt", "c.pt"):
            torch.save(_big(), folder / name)
    marker.on_save(args, state, control)
    marker.abandon()
    assert marker.pending is None and writer.batch is not None and writer.batch.abandoned
    assert len(list(folder.glob("*.pt"))) <= 1  # the file being written, not the other two
    assert not (folder / "hpc_grpo_complete.json").exists()
