"""The generation buffer goes into a checkpoint only inside a block, and comes back only under
the settings it was saved with (generation_buffer.py). The end-to-end proof that a resume then
equals the uninterrupted run is tests/slow/test_resume_generation_buffer.py."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch

from hpc_grpo.runtime import contract
from hpc_grpo.runtime.rank import generation_buffer
from hpc_grpo.runtime.rank.callbacks import MetricsCallback


def trainer(step: int, spg: int = 2, iterations: int = 2, buffered: Any = "auto") -> Any:
    args = types.SimpleNamespace(steps_per_generation=spg, per_device_train_batch_size=4,
                                 gradient_accumulation_steps=1)
    if buffered == "auto":
        buffered = [{"ids": torch.arange(6).reshape(2, 3) + k, "old_logps": None} for k in range(spg)]
    return types.SimpleNamespace(args=args, num_iterations=iterations, _step=step,
                                 _buffered_inputs=buffered)


def test_inside_a_block_only() -> None:
    # generate_every = 2 x 2 = 4 micro-steps: 1-3 reuse the buffer, 4 and 8 generate
    assert [generation_buffer.inside_block(trainer(s)) for s in range(9)] == [
        False, True, True, True, False, True, True, True, False]
    assert not generation_buffer.inside_block(trainer(1, spg=1, iterations=1))  # TRL's default
    assert not generation_buffer.inside_block(trainer(1, buffered=None))  # nothing generated yet


def test_saved_buffer_comes_back_with_its_counter(tmp_path: Path) -> None:
    saved = trainer(5)
    path = generation_buffer.save(saved, tmp_path, rank=1, world_size=2)
    assert path == tmp_path / generation_buffer.FOLDER / "rank-1.pt"
    fresh = trainer(0, buffered=None)
    line = generation_buffer.load(fresh, tmp_path, rank=1, world_size=2, device="cpu")
    assert "micro-step 5 restored" in line and fresh._step == 5
    assert torch.equal(fresh._buffered_inputs[1]["ids"], saved._buffered_inputs[1]["ids"])
    assert fresh._buffered_inputs[0]["old_logps"] is None
    assert not (tmp_path / generation_buffer.FOLDER / ".rank-1.pt.tmp").exists()


def test_nothing_at_a_block_end(tmp_path: Path) -> None:
    assert generation_buffer.save(trainer(8), tmp_path, rank=0, world_size=2) is None
    assert not (tmp_path / generation_buffer.FOLDER).exists()
    fresh = trainer(0, buffered=None)
    assert generation_buffer.load(fresh, tmp_path, rank=0, world_size=2, device="cpu") == ""
    assert fresh._step == 0 and fresh._buffered_inputs is None


def test_other_settings_or_world_size_regenerate_and_say_so(tmp_path: Path) -> None:
    generation_buffer.save(trainer(5), tmp_path, rank=0, world_size=2)
    other = trainer(0, spg=4, buffered=None)  # the buffer's split no longer fits
    line = generation_buffer.load(other, tmp_path, rank=0, world_size=2, device="cpu")
    assert "not used" in line and other._step == 0 and other._buffered_inputs is None
    wider = trainer(0, buffered=None)  # rank 3 of a larger world: no file of its own
    line = generation_buffer.load(wider, tmp_path, rank=3, world_size=4, device="cpu")
    assert "no generation buffer for rank 3" in line and wider._buffered_inputs is None


def test_every_step_gets_a_metrics_line_rewarded_or_not(tmp_path: Path) -> None:
    """A step that trains on an earlier step's generation logs a loss but no reward: it still
    gets its line (and moves state.json's step); TRL's end-of-training summary does not."""
    from transformers import TrainerControl, TrainerState

    callback = MetricsCallback(tmp_path)
    for step, logs in ((1, {"reward": 0.5, "loss": 0.1}), (2, {"loss": 0.2}),
                       (2, {"train_loss": 0.15, "train_runtime": 3.0})):
        state = TrainerState(global_step=step, max_steps=2, is_world_process_zero=True)
        callback.on_log(None, state, TrainerControl(), logs=logs)  # type: ignore[arg-type]
    rows = [json.loads(x) for x in (tmp_path / contract.METRICS_JSONL).read_text().splitlines()]
    assert [(r["step"], r["reward_mean"], r["loss"]) for r in rows] == [(1, 0.5, 0.1), (2, None, 0.2)]
    assert json.loads((tmp_path / contract.STATE_JSON).read_text())["step"] == 2


def test_status_shows_the_newest_reward_on_a_step_without_one(tmp_path: Path) -> None:
    from hpc_grpo.runs import runfiles

    (tmp_path / "run.json").write_text(json.dumps({"run_id": "blocks-0001"}))
    (tmp_path / contract.STATE_JSON).write_text(json.dumps({"phase": "training", "step": 6}))
    (tmp_path / contract.METRICS_JSONL).write_text("".join(
        json.dumps({"step": s, "reward_mean": r, "tokens_per_s": 9.0}) + "\n"
        for s, r in ((4, None), (5, -0.25), (6, None))))
    progress = runfiles.read_run(tmp_path).progress
    assert (progress.step, progress.reward) == (6, -0.25)


def test_steps_to_the_next_generation() -> None:
    # generate_every 4 micro-steps; micro-step 5 (after optimizer step 5, GA 1): steps 6, 7, 8
    # train on the buffer, step 9 generates
    assert generation_buffer.steps_to_generation(trainer(5)) == 4
    assert generation_buffer.steps_to_generation(trainer(7)) == 2
    two = trainer(2, spg=4, iterations=1)  # GA 2: micro-steps 2-3 are step 2, 4 generates in step 3
    two.args.gradient_accumulation_steps = 2
    assert generation_buffer.steps_to_generation(two) == 2


def test_heartbeat_holds_its_step_reference_until_a_generation(tmp_path: Path) -> None:
    """After a restored buffer the watchdog must not judge the first generation by the training
    -only steps before it: no step time is reported until a generating step has ended."""
    from hpc_grpo.runtime.rank.heartbeat import Heartbeat

    def slowest(beat: Heartbeat) -> Any:
        return json.loads(beat.path.read_text())["slowest_s"]

    beat = Heartbeat(tmp_path, rank=0, attempt="a")
    beat.train_begin(5)
    beat.hold_reference(4)
    for step in (6, 7, 8):
        beat.step_end(step, saving=False)
        assert slowest(beat) is None
    beat.mark("transformers.generate")
    beat.step_end(9, saving=False)
    assert slowest(beat) is not None
    # without a generation block seen (a rollout of its own), the hold ends after its steps
    other = Heartbeat(tmp_path / "b", rank=0, attempt="a")
    other.train_begin(0)
    other.hold_reference(2)
    other.step_end(1, saving=False)
    assert slowest(other) is None
    other.step_end(2, saving=False)
    assert slowest(other) is not None
