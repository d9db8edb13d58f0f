"""checkpoints/rng_states.py: which saved RNG state each rank takes on a resume at another world
size (transformers reads rng_state_<rank>.pth above one process, rng_state.pth at one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_grpo.runtime.rank.checkpoints import rng_states

TWO = {"rng_state_0.pth", "rng_state_1.pth"}


def test_the_same_world_size_is_transformers_own_read() -> None:
    assert rng_states.choose(TWO, 2, 1) == (None, "RNG state: rng_state_1.pth (saved by 2 rank(s))")
    assert rng_states.choose({"rng_state.pth"}, 1, 0)[0] is None


def test_rank_zero_keeps_its_state_across_one_and_several_processes() -> None:
    assert rng_states.choose(TWO, 1, 0)[0] == "rng_state_0.pth"  # 1 x 2 -> 1 x 1
    assert rng_states.choose({"rng_state.pth"}, 4, 0)[0] == "rng_state.pth"  # 1 x 1 -> 1 x 4


def test_ranks_that_did_not_exist_start_as_a_fresh_runs() -> None:
    source, line = rng_states.choose({"rng_state.pth"}, 4, 3)
    assert source is None and line.endswith("seeded as a fresh run's rank")
    source, line = rng_states.choose(TWO, 4, 2)  # 2 -> 4: ranks 2 and 3 are new
    assert source is None and "none for rank 2" in line


def test_the_trainer_reads_the_chosen_file_under_its_own_name(tmp_path: Path) -> None:
    (tmp_path / "rng_state_0.pth").write_text("rank 0")
    seen: list[str] = []

    class Trainer:
        def _load_rng_state(self, checkpoint: str | None) -> None:
            seen.append((Path(checkpoint) / "rng_state.pth").read_text() if checkpoint else "")

    trainer: Any = Trainer()
    rng_states.follow_rank_zero(trainer, tmp_path / "rng_state_0.pth", "rng_state.pth")
    trainer._load_rng_state(str(tmp_path))
    assert seen == ["rank 0"] and sorted(p.name for p in tmp_path.iterdir()) == ["rng_state_0.pth"]
