"""epoch_order: a fresh sampler (a resumed process's) replays the uninterrupted run's epoch orders."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("trl")

from transformers import TrainerControl, TrainerState, TrainingArguments  # noqa: E402
from trl.trainer.utils import RepeatSampler  # noqa: E402

from hpc_grpo.runtime.rank.data import epoch_order  # noqa: E402

DATA = list(range(10))


def sampler(**over: Any) -> RepeatSampler:
    """Built as GRPOTrainer builds it: 2 prompts a batch, 4 generations each, seeded."""
    kwargs: dict[str, Any] = {"mini_repeat_count": 4, "batch_size": 2, "repeat_count": 1, "seed": 42}
    return RepeatSampler(DATA, **(kwargs | over))


def uninterrupted(epochs: int) -> list[list[int]]:
    one = sampler()
    return [list(one) for _ in range(epochs)]


def test_fresh_sampler_positioned_at_epoch_yields_that_epochs_order() -> None:
    orders = uninterrupted(5)
    assert len({tuple(o) for o in orders}) == 5  # a new order every epoch
    assert list(sampler()) == orders[0] != orders[3]  # the bug: a fresh sampler restarts at epoch 0
    for epoch in range(5):
        fresh = sampler()
        assert epoch_order.position(fresh, epoch)
        assert list(fresh) == orders[epoch]
        if epoch + 1 < 5:
            assert list(fresh) == orders[epoch + 1]  # and the next epoch follows as before
    used = sampler()
    for _ in range(4):
        list(used)  # a sampler anywhere in its stream is put back to the asked epoch
    assert epoch_order.position(used, 1) and list(used) == orders[1]


def test_unshuffled_or_unseeded_samplers_are_left_alone() -> None:
    assert not epoch_order.position(sampler(shuffle=False), 3)
    assert not epoch_order.position(sampler(seed=None), 3)
    assert not epoch_order.position(object(), 3)


def state_at(epoch: float | None) -> TrainerState:
    state = TrainerState()
    state.epoch = epoch  # type: ignore[assignment]
    return state


@pytest.mark.parametrize(("epoch", "index"), [(None, 0), (0.0, 0), (1.0, 1), (2.5, 2), (2.999, 2), (3.0, 3)])
def test_callback_positions_at_the_trainer_states_epoch(epoch: float | None, index: int) -> None:
    orders = uninterrupted(4)
    callback = epoch_order.EpochOrderCallback()
    callback.sampler = sampler()
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    control = TrainerControl()
    assert callback.on_epoch_begin(args, state_at(epoch), control) is control
    assert callback.positioned == [index]
    assert list(callback.sampler) == orders[index]


def test_install_records_the_train_sampler_and_adds_the_callback() -> None:
    class Trainer:
        def __init__(self) -> None:
            self.callbacks: list[Any] = []

        def _get_train_sampler(self, dataset: Any = None) -> RepeatSampler:
            return sampler()

        def add_callback(self, callback: Any) -> None:
            self.callbacks.append(callback)

    trainer = Trainer()
    callback = epoch_order.position_sampler(trainer)
    assert trainer.callbacks == [callback] and callback.sampler is None
    built = trainer._get_train_sampler(DATA)
    assert isinstance(built, RepeatSampler) and callback.sampler is built
