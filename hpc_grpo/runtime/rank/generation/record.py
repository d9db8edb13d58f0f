"""Record what each rank's embedded vLLM engine generated, as hashes, in the run directory.

With TP > 1 every engine of a group generates the whole group's batch from the same seed, so
the records of a group must be identical; different groups (different seeds) must differ. This
makes the TP/seed layout checkable from the run's own files after the fact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import GENERATIONS
from hpc_grpo.rundir.placement import rank_row
from hpc_grpo.runtime.rank.context import HookContext


def digest(outputs: Any) -> tuple[str, int]:
    """sha256 over every completion's token ids of one ``LLM.generate`` result, and their count."""
    sha = hashlib.sha256()
    count = 0
    for request in outputs:
        for completion in request.outputs:
            sha.update(json.dumps(list(completion.token_ids)).encode())
            count += 1
    return sha.hexdigest(), count


def install(trainer: Any, ctx: HookContext) -> list[str]:
    """The hook: ``record_first`` with this rank's vLLM seed, silent."""
    seed = rank_row(ctx.rank, ctx.run.procs_per_node, ctx.run.vllm.tensor_parallel_size).vllm_seed
    record_first(trainer, ctx.run_dir, ctx.rank, seed=seed)
    return []


def record_first(trainer: Any, run_dir: Path, rank: int, seed: int, calls: int = 3) -> bool:
    """Wrap the colocated engine's ``generate`` to log its first ``calls`` results."""
    generation = getattr(trainer, "vllm_generation", None)
    llm = getattr(generation, "llm", None)
    if llm is None:
        return False
    path = run_dir / GENERATIONS / f"rank-{rank}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    original = llm.generate
    seen = {"n": 0}

    def generate(*args: Any, **kwargs: Any) -> Any:
        outputs = original(*args, **kwargs)
        if seen["n"] < calls:
            sha, count = digest(outputs)
            line = {"call": seen["n"], "rank": rank, "vllm_seed": seed, "sha256": sha,
                    "completions": count}
            with path.open("a") as handle:
                handle.write(json.dumps(line) + "\n")
            seen["n"] += 1
        return outputs

    llm.generate = generate
    return True
