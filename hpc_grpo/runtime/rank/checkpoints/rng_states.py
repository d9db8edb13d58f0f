"""Each rank's RNG state on a resume at another world size (``hpc-grpo resume --nodes N``).

Why: transformers 5.x (``Trainer._load_rng_state``) reads ``rng_state_<process index>.pth``
when the world size is above 1 and ``rng_state.pth`` when it is 1; a file it does not find is
skipped with an info line, and the rank keeps the state its own start gave it (``set_seed(seed)``
in the trainer's construction: what a fresh run's rank has). So at another world size the ranks
that no longer exist are dropped (their files are never read) and new ranks start as a fresh
run's, as wanted, but rank 0 would lose its own state across 1 <-> N: a run saved by one
process has ``rng_state.pth`` where N processes look for ``rng_state_0.pth``, and the reverse.

What: on a resume whose checkpoint lacks the name transformers reads for this rank but has
rank 0's under the other name, that file is read (through a link of the expected name in a
temporary folder: transformers' own read does the rest). One line per rank says which state it
took. Nothing is written into the checkpoint.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.rank.context import HookContext

SINGLE = "rng_state.pth"


def expected_name(world_size: int, rank: int) -> str:
    """The file transformers reads for this rank."""
    return f"rng_state_{rank}.pth" if world_size > 1 else SINGLE


def rank_zero_other_name(world_size: int) -> str:
    """Rank 0's file as a run at the other kind of world size (1 or more) saved it."""
    return "rng_state_0.pth" if world_size == 1 else SINGLE


def choose(names: set[str], world_size: int, rank: int) -> tuple[str | None, str]:
    """(the checkpoint's file to read under transformers' name, None: transformers' own choice;
    the rank's line). ``names``: the checkpoint's RNG files."""
    wanted = expected_name(world_size, rank)
    saved = len({n for n in names if n.startswith("rng_state")})
    if wanted in names:
        return None, f"RNG state: {wanted} (saved by {saved} rank(s))"
    other = rank_zero_other_name(world_size)
    if rank == 0 and other in names:
        return other, f"RNG state: {other} (rank 0's, saved by a run of another world size)"
    return None, (f"RNG state: none for rank {rank} in the checkpoint (saved by {saved} "
                  "rank(s)): seeded as a fresh run's rank")


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``follow_rank_zero``; its line on a resume."""
    if ctx.resume is None:
        return []
    names = {p.name for p in ctx.resume.glob("rng_state*.pth")}
    source, line = choose(names, ctx.run.world_size, ctx.rank)
    if source is not None:
        follow_rank_zero(trainer, ctx.resume / source, expected_name(ctx.run.world_size, ctx.rank))
    return [line]


def follow_rank_zero(trainer: Any, source: Path, name: str) -> None:
    """Make the trainer's RNG read take ``source`` as the file it expects under ``name``."""
    load = trainer._load_rng_state

    def load_rng_state(checkpoint: str | None) -> None:
        if checkpoint is None:
            return load(checkpoint)
        with tempfile.TemporaryDirectory(prefix="hpc-grpo-rng-") as folder:
            (Path(folder) / name).symlink_to(source.resolve())
            return load(folder)

    trainer._load_rng_state = load_rng_state
