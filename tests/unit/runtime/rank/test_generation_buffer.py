"""The generation buffer goes into a checkpoint only inside a block, and comes back only under
the settings it was saved with (rank/generation/buffer.py). The end-to-end proof that a resume then
equals the uninterrupted run is tests/slow/test_resume_generation_buffer.py."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch

from hpc_grpo.rundir import contract
from hpc_grpo.runtime.rank.callbacks import MetricsCallback
from hpc_grpo.runtime.rank.generation import buffer as generation_buffer


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
    from hpc_grpo.runtime.rank.observe.heartbeat import Heartbeat

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


def test_held_steps_get_the_start_up_allowance_from_the_last_progress() -> None:
    """While every rank holds its reference (steps done, no step time reported) the bound is the
    start-up allowance, counted from the rank's last progress, not the attempt's start: a long
    model load plus held steps must not add up to a stall."""
    from hpc_grpo.runtime.node.stall import Beat, Policy, judge

    policy = Policy(startup_s=100.0, min_s=10.0, factor=3.0)
    t0 = 1_000_000.0
    held = {r: Beat(rank=r, attempt="a1", phase="training", step=7, steps_done=2, mark=0,
                    block="", time=t0 + 90, slowest_s=None) for r in range(2)}
    assert judge(held, 2, "a1", t0 + 189, t0, policy) is None  # 189 s into the attempt
    found = judge(held, 2, "a1", t0 + 191, t0, policy)
    assert found is not None and found.bound_s == 100 and round(found.idle_s) == 101


def test_tokens_per_s_only_where_tokens_were_counted(tmp_path: Path) -> None:
    """TRL logs its running num_tokens only on a step that generated: a step without one has no
    rate (not minus the total), and the next generating step's rate counts only its new tokens."""
    from transformers import TrainerControl, TrainerState

    callback = MetricsCallback(tmp_path)
    for step, logs in ((1, {"reward": 0.5, "loss": 0.1, "num_tokens": 100.0, "step_time": 2.0}),
                       (2, {"loss": 0.2, "step_time": 1.0}),
                       (3, {"reward": 0.6, "loss": 0.3, "num_tokens": 160.0, "step_time": 2.0})):
        state = TrainerState(global_step=step, max_steps=3, is_world_process_zero=True)
        callback.on_log(None, state, TrainerControl(), logs=logs)  # type: ignore[arg-type]
    rows = [json.loads(x) for x in (tmp_path / contract.METRICS_JSONL).read_text().splitlines()]
    assert [r["tokens_per_s"] for r in rows] == [50.0, None, 30.0]


def test_status_finds_reward_and_drift_many_steps_back(tmp_path: Path) -> None:
    """One generation training 12 steps: the newest reward and log-prob difference are 11 lines
    back, further than drift's window of lines."""
    from hpc_grpo.runs import drift, runfiles

    rows = [{"step": 1, "reward_mean": -0.5, contract.LOGP_DIFF_MEAN: 5.0}]
    rows += [{"step": s, "reward_mean": None} for s in range(2, 13)]
    assert len(rows) - 1 > drift.WINDOW
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "blocks-0002"}))
    (tmp_path / contract.STATE_JSON).write_text(json.dumps({"phase": "training", "step": 12}))
    (tmp_path / contract.METRICS_JSONL).write_text("".join(json.dumps(r) + "\n" for r in rows))
    progress = runfiles.read_run(tmp_path).progress
    assert (progress.step, progress.reward, progress.logp_diff) == (12, -0.5, 5.0)
    assert progress.drift.startswith("vLLM drift: at step 1")


def test_a_buffer_the_loss_would_read_wrongly_is_not_used(tmp_path: Path) -> None:
    """beta 0 saves no reference log-probs; a resume with beta > 0 would look them up and crash
    on every attempt. A damaged file is not used either."""
    generation_buffer.save(trainer(5), tmp_path, rank=0, world_size=2)
    kl = trainer(0, buffered=None)
    kl.beta = 0.04
    line = generation_buffer.load(kl, tmp_path, rank=0, world_size=2, device="cpu")
    assert "not used" in line and "'beta': 0.04" in line and kl._buffered_inputs is None
    (tmp_path / generation_buffer.FOLDER / "rank-0.pt").write_bytes(b"cut off")
    line = generation_buffer.load(trainer(0, buffered=None), tmp_path, rank=0, world_size=2,
                                  device="cpu")
    assert "cannot be read" in line and "generates anew" in line


def test_all_ranks_restore_or_none_does(tmp_path: Path, monkeypatch: Any) -> None:
    """A rank that restored while another could not would skip the generation (and its
    collectives) the other runs: the run would hang. Then every rank generates anew."""
    generation_buffer.save(trainer(5), tmp_path, rank=0, world_size=2)

    def resumed() -> Any:
        fresh = trainer(0, buffered=None)
        fresh.accelerator = types.SimpleNamespace(device="cpu")
        fresh.state = types.SimpleNamespace(global_step=5)
        fresh._save_checkpoint = lambda model, trial: None
        return fresh

    monkeypatch.setattr(generation_buffer, "_everywhere", lambda flag: True)
    alone = resumed()
    line = generation_buffer.save_with_checkpoints(alone, 0, 2, tmp_path)
    assert line.startswith(generation_buffer.RESTORED)
    assert alone._step == 5 and alone._buffered_inputs is not None
    monkeypatch.setattr(generation_buffer, "_everywhere", lambda flag: False)  # rank 1 failed
    dropped = resumed()
    line = generation_buffer.save_with_checkpoints(dropped, 0, 2, tmp_path)
    assert line.endswith("then dropped: another rank could not restore its own")
    assert dropped._step == 0 and dropped._buffered_inputs is None
