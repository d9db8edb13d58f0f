"""Rank-table recomputation and cross-rank checks (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from hpc_grpo.runtime.rank.setup.placement import (
    RuntimeCheckError,
    cuda_problems,
    expected_row,
    gathered_problems,
    layout_problems,
    own_row_problems,
)
from tests.unit.runtime.rank.runtime_checks_helpers import make_run, record


def env(rank: int, ppn: int = 4, world: int = 8, **extra: str) -> dict[str, str]:
    base = {"RANK": str(rank), "LOCAL_RANK": str(rank % ppn), "WORLD_SIZE": str(world)}
    return base | {"SLURM_NODEID": str(rank // ppn)} | extra


def test_expected_row_contiguous_nodes_and_tp_groups() -> None:
    rows = [expected_row(r, 4, 2) for r in range(8)]
    assert [r["node"] for r in rows] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r["local_rank"] for r in rows] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r["tp_group"] for r in rows] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [r["tp_rank"] for r in rows] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [r["vllm_seed"] for r in rows] == [r["tp_group"] for r in rows]


def test_own_row_matches_plan() -> None:
    run = make_run()
    for rank in range(8):
        row, problems = own_row_problems(record(run), env(rank))
        assert problems == []
        assert row == {k: run["ranks"][rank][k] for k in row}


def test_own_row_reports_each_mismatch() -> None:
    run = make_run()
    run["ranks"][5]["vllm_seed"] = 9
    run["ranks"][5]["node"] = 0
    _, problems = own_row_problems(record(run), env(5, LOCAL_RANK="2", SLURM_NODEID="0"))
    text = "; ".join(problems)
    assert "LOCAL_RANK=2, expected 1" in text
    assert "SLURM_NODEID=0, expected node 1" in text
    assert "vllm_seed=9" in text and "node=0" in text


def test_world_size_mismatch_and_missing_row() -> None:
    run = make_run()
    run["ranks"] = run["ranks"][:4]
    _, problems = own_row_problems(record(run), env(6, world=6))
    assert any("WORLD_SIZE=6" in p for p in problems)
    assert any("rank 6: no row" in p for p in problems)
    assert any("4 rank rows, expected 8" in p for p in layout_problems(record(run)))


def test_missing_torchrun_env_is_a_check_error() -> None:
    with pytest.raises(RuntimeCheckError, match="RANK/LOCAL_RANK/WORLD_SIZE"):
        own_row_problems(record(make_run()), {})


def test_layout_tp_must_divide_procs_per_node() -> None:
    run = make_run(nodes=2, ppn=4, tp=2)
    run["vllm"]["tensor_parallel_size"] = 3
    wanted = "tensor parallel size 3 does not divide 4 processes per node"
    assert any(wanted in p for p in layout_problems(record(run)))
    assert layout_problems(record(make_run())) == []


def test_layout_colocate_rejects_server_settings() -> None:
    run = make_run(server={"node": 1, "gpus": [0], "trainer_gpus": [1]})
    assert any("colocate" in p for p in layout_problems(record(run)))
    run = make_run()
    run["grpo_config"]["vllm_server_host"] = "x"
    assert any("vllm_server_host" in p for p in layout_problems(record(run)))


def gathered(hosts: list[str], tp: int = 2, ppn: int = 2) -> list[dict[str, Any]]:
    return [expected_row(r, ppn, tp) | {"hostname": h} for r, h in enumerate(hosts)]


def test_gathered_ok_and_tp_group_split_across_hosts() -> None:
    assert gathered_problems(gathered(["a", "a", "b", "b"])) == []
    problems = gathered_problems(gathered(["a", "b", "b", "b"]))
    assert any("node 0 ranks run on several hosts" in p for p in problems)
    assert any("TP group 0 spans" in p for p in problems)


def test_gathered_shared_seed_and_device() -> None:
    rows = gathered(["a", "a", "b", "b"])
    rows[2]["vllm_seed"] = rows[3]["vllm_seed"] = 0
    rows[0]["device_id"] = rows[1]["device_id"] = "a:GPU-1"
    problems = gathered_problems(rows)
    assert any("share vllm seed 0" in p for p in problems)
    assert any("share device a:GPU-1" in p for p in problems)


def test_cuda_problems() -> None:
    assert cuda_problems(1, 3, 3, 8) == []
    assert cuda_problems(1, 0, 3, 1) == []  # Slurm bound one GPU per task
    assert any("nn.DataParallel" in p for p in cuda_problems(8, 0, 0, 8))
    assert any("expected 3" in p for p in cuda_problems(1, 0, 3, 8))
