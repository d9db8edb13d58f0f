"""How many nodes this attempt runs on, and the run record at that count (``min_nodes``, #60).

A job that asks Slurm for ``--nodes=MIN-MAX`` may start on fewer nodes than run.json's. The node
task reads the count Slurm granted and applies rundir/reshard.record_at (the one rule); it hands
the count to its ranks as ``HPC_GRPO_ATTEMPT_NODES`` so each rank applies the same rule to the
same value, and run.json is never rewritten under a running job. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.reshard import record_at, with_conversion_time

ATTEMPT_NODES = "HPC_GRPO_ATTEMPT_NODES"  # the node task's count, exported to its ranks


def granted(env: Mapping[str, str]) -> int | None:
    """The job's node count as Slurm exports it (None outside Slurm)."""
    value = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    return int(value) if value.isdigit() else None


def _at(record: RunRecord, nodes: int) -> RunRecord:
    """``record_at``, and for a ZeRO run room for the conversion in the watchdog's start-up and
    the collective timeout (as ``resume --nodes`` plans it): any attempt of a run that may
    change size, the one growing back at the full count included, may meet a checkpoint saved
    at another world size."""
    at = record_at(record, nodes)
    zero = record.deepspeed.zero_stage if record.deepspeed else None
    return with_conversion_time(at, zero) if record.min_nodes and zero else at


def for_node_task(record: RunRecord, env: Mapping[str, str]) -> RunRecord:
    """The record this node task's attempt runs: at Slurm's count where the run allows fewer
    nodes, else run.json's own (a fixed count, or a dedicated server node in the allocation)."""
    nodes = granted(env) if record.min_nodes else None
    return _at(record, nodes) if nodes else record


def for_rank(record: RunRecord, env: Mapping[str, str]) -> RunRecord:
    """The record a rank trains with: at the count its node task exported (run.json's own
    where none was, e.g. a rank started by hand)."""
    value = env.get(ATTEMPT_NODES, "")
    return _at(record, int(value)) if value.isdigit() else record
