from __future__ import annotations

import pytest

from hpc_grpo.errors import UserError
from hpc_grpo.planner.topology import rank_table, server_split


def test_two_nodes_tp_one() -> None:
    rows = rank_table(2, 2, 1)
    assert [(r.node, r.rank, r.local_rank, r.vllm_seed) for r in rows] == [
        (0, 0, 0, 0), (0, 1, 1, 1), (1, 2, 0, 2), (1, 3, 1, 3)]


def test_tp_groups_are_contiguous_and_inside_a_node() -> None:
    rows = rank_table(3, 4, 2)
    assert len(rows) == 12
    for row in rows:
        assert row.tp_group == row.rank // 2 == row.vllm_seed
        assert row.tp_rank == row.rank % 2
    groups: dict[int, set[int]] = {}
    for row in rows:
        groups.setdefault(row.tp_group, set()).add(row.node)
    assert all(len(nodes) == 1 for nodes in groups.values())
    assert len({r.vllm_seed for r in rows}) == 6


def test_tp_eight_on_eight_gpu_nodes() -> None:
    rows = rank_table(4, 8, 8)
    assert {r.vllm_seed for r in rows} == {0, 1, 2, 3}
    assert all(r.tp_group == r.node for r in rows)


@pytest.mark.parametrize(("procs", "tp", "message"), [
    (4, 3, "does not divide"),
    (2, 4, "larger than a node"),
    (4, 0, "at least 1"),
])
def test_refusals(procs: int, tp: int, message: str) -> None:
    with pytest.raises(UserError, match=message):
        rank_table(2, procs, tp)


def test_server_split_one_node() -> None:
    split = server_split(1, 2, 1)
    assert split.server_gpus == (0,)
    assert split.trainer_gpus == (1,)
    assert split.idle_gpus_per_node == 0


def test_server_split_multi_node_reports_idle() -> None:
    split = server_split(4, 8, 2)
    assert split.trainer_gpus == (2, 3, 4, 5, 6, 7)
    assert split.server_node == 3
    assert split.idle_gpus_per_node == 2


@pytest.mark.parametrize(("gpus", "server"), [(1, 1), (8, 0), (8, 8)])
def test_server_split_refusals(gpus: int, server: int) -> None:
    with pytest.raises(UserError):
        server_split(1, gpus, server)
