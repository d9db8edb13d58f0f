"""status's line of each attempt's node count where the run allows fewer (min_nodes, #60)."""

from __future__ import annotations

from hpc_grpo.rundir.view import RestartLine
from hpc_grpo.runs import attempts


def _restart(attempt: str, nodes: int | None) -> RestartLine:
    return RestartLine.from_dict({"attempt": attempt, "previous_attempt": "slurm-5.0",
                                  "cause": "node failure", **({"nodes": nodes} if nodes else {})})


def test_each_restarted_attempt_with_its_count_and_why() -> None:
    line = attempts.nodes_line([_restart("slurm-5.1", 2), _restart("slurm-5.2", 3)],
                               {"attempt": "slurm-5.2", "nodes": 3}, 3, 2)
    assert line == ("attempt 2 on 2 of 3 nodes (min_nodes 2: Slurm granted the nodes free), "
                    "attempt 3 on 3 of 3 nodes")


def test_nothing_without_min_nodes_or_counts() -> None:
    assert attempts.nodes_line([_restart("slurm-5.1", 3)], {}, 3, 0) == ""
    assert attempts.nodes_line([_restart("slurm-5.1", None)], {}, 3, 2) == ""
    assert RestartLine.from_dict({"nodes": 2}).to_row()["nodes"] == 2


def test_a_first_attempt_on_fewer_nodes_is_named_from_startup() -> None:
    """Slurm starts the first attempt too as soon as min_nodes are free: no restart line then."""
    assert attempts.nodes_line([], {"attempt": "slurm-7.0", "nodes": 2}, 3, 2) == (
        "attempt 1 on 2 of 3 nodes (min_nodes 2: Slurm granted the nodes free)")
