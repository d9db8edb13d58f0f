"""Server mode with a node of its own: on nodes of one GPU (the GPU sandbox, many clusters'
GPU partitions), or when the server is given all of a node's GPUs, the last node runs `vllm
serve` and nothing else, the other nodes train on all their GPUs, and the weights reach the
server over the link between the nodes, which the step-time model charges."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.errors import UserError
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.job import JobPlan, build_plan
from hpc_grpo.planner.speed import terms
from hpc_grpo.planner.speed.server import plan_server
from hpc_grpo.planner.topology import server_split
from hpc_grpo.planner.types import LinkFigures, ModelRef
from hpc_grpo.scheduler.render import render_script, summary_text
from tests.unit.planner.speed_choice_helpers import request

SANDBOX_LINK = 2.553  # doctor on the GPU sandbox, 2026-11-27 (docs/benchmarks.md, session 36)


def test_one_gpu_nodes_give_the_server_the_last_node() -> None:
    split = server_split(2, 1, 1)
    assert (split.dedicated, split.server_node, split.trainer_nodes) == (True, 1, 1)
    assert split.server_gpus == split.trainer_gpus == (0,) and split.idle_gpus_per_node == 0
    wide = server_split(3, 4, 4)  # a whole 4-GPU node for the server, two nodes train on 4 each
    assert (wide.dedicated, wide.server_node, wide.trainer_nodes) == (True, 2, 2)
    assert wide.trainer_gpus == (0, 1, 2, 3)
    shared = server_split(3, 4, 1)  # as before: every node trains on 3, one GPU idles on two
    assert (shared.dedicated, shared.trainer_nodes, shared.idle_gpus_per_node) == (False, 3, 1)


@pytest.mark.parametrize(("nodes", "gpus", "server", "says"), [
    (1, 1, 1, "use --nodes 2 (the last node serves)"),
    (1, 4, 4, "or --nodes 2 for a server node of its own"),
    (2, 4, 5, "between 1 and 4, got 5"), (2, 4, 0, "between 1 and 4, got 0"),
    (2, 1, 2, "between 1 and 1, got 2")])  # not "use --nodes 2" to a job that has 2
def test_what_leaves_no_trainer_is_refused_with_the_way_out(nodes: int, gpus: int, server: int,
                                                             says: str) -> None:
    with pytest.raises(UserError) as refused:
        server_split(nodes, gpus, server)
    assert says in f"{refused.value.message} (hint: {refused.value.hint})"


def test_the_weights_cross_the_link_to_a_server_node() -> None:
    """One trainer node: its data-parallel exchange is inside the node, but the push to the
    server is not; the model once charged it at the link inside a node."""
    trainers = request("qwen2-1.5b", gpu_memory_gib=79.0, per_device_train_batch_size=64,
                       inter_node_gbs=SANDBOX_LINK)
    arch = builtin_arch("qwen2-1.5b")
    assert arch is not None
    across = dict(plan_server(trainers, 1, 0.9, 0, across_nodes=True).step.terms)
    inside = dict(plan_server(trainers, 1, 0.9, 0).step.terms)
    push = "weight push to the server"
    assert across[push] == pytest.approx(terms.server_push_s(arch.num_params, SANDBOX_LINK))
    assert across[push] > 5 * inside[push]


def _sandbox_like(nodes: int, mode: str, **grpo: object) -> JobPlan:
    """The GPU sandbox's profile under other names (partition, site), a 1.5B shape, the link
    doctor measured there."""
    site = replace(find_site("sandbox-gpu"), name="onegpu-cluster", partition="gpu-a")
    arch = builtin_arch("qwen2-1.5b")
    spec = build_spec({"model_name_or_path": "builtin:qwen2-1.5b", "nodes": nodes,
                       "vllm_mode": mode, **grpo}, {}, {}, site)
    return build_plan(site, spec, ModelRef("builtin:qwen2-1.5b", local=True, arch=arch),
                      links=LinkFigures(inter_node_gbs=SANDBOX_LINK, source="doctor"))


def test_the_plan_trains_on_all_but_the_server_node_and_the_script_asks_for_all() -> None:
    plan = _sandbox_like(3, "server", per_device_train_batch_size=32)
    assert plan.nodes == 3 and plan.training_nodes == 2 and plan.world_size == 2
    record = plan.run_record("r1", "/runs/r1").to_dict()
    assert record["nodes"] == 2 and len(record["ranks"]) == 2
    assert record["vllm"]["server"] == {"node": 2, "gpus": [0], "trainer_gpus": [0]}
    script = render_script(plan, run_id="r1", run_dir="/runs/r1", python="python3")
    assert "#SBATCH --nodes=3" in script and "#SBATCH --partition=gpu-a" in script
    text = summary_text(plan)
    assert "3 node(s), the last serving only: 2 x 1 process(es) = world size 2" in text
    assert "node 2 GPUs [0] run vllm serve and no trainer; nodes 0-1 train on GPUs [0]" in text
    served = plan.server_plan
    assert served is not None and served.fits
    assert dict(served.step.terms)["weight push to the server"] > 1.0  # 3.1 GB at 2.55 GB/s


def test_a_recipe_s_num_processes_counts_only_the_trainers() -> None:
    site = replace(find_site("sandbox-gpu"), partition="gpu-a")
    spec = build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "server",
                       "num_processes": 1}, {}, {}, site)
    assert spec.nodes == 2
    with pytest.raises(UserError, match="but the plan runs 1 training processes"):
        build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "server",
                    "num_processes": 2}, {}, {}, site)


def test_auto_weighs_a_server_node_on_one_gpu_nodes() -> None:
    """Once "server mode needs 2+ GPUs" on every one-GPU site; now the two are compared."""
    plan = _sandbox_like(2, "auto", per_device_train_batch_size=32)
    line = next(w for w in plan.warnings if w.startswith("vllm_mode auto"))
    assert "needs 2+ GPUs" not in line and "server mode's" in line, line


def test_under_auto_a_num_processes_only_one_mode_runs_chooses_it() -> None:
    """auto picks the mode later, from the step-time model; a recipe's count that only one mode
    runs (open-r1's 7 of 8 GPUs is server mode's) chooses that mode, said among the changes,
    rather than passing the check and being ignored; a count both run leaves auto to choose; a
    count neither runs is refused, naming both."""
    site = replace(find_site("sandbox-gpu"), partition="gpu-a")  # 1 GPU a node
    for processes, mode, other in ((1, "server", "colocate"), (2, "colocate", "server")):
        spec = build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "auto",
                           "num_processes": processes}, {}, {}, site)
        assert spec.vllm_mode == mode
        assert any(line == f"vllm_mode: auto -> {mode} (num_processes {processes} is {mode} "
                   f"mode's training processes; {other} runs {3 - processes} training processes)"
                   for line in spec.changes), spec.changes
    both = build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "auto",
                       "procs_per_node": 1, "num_processes": 2}, {}, {},
                      replace(site, gpus_per_node=2))  # colocate 2 x 1, server 2 x (2 - 1)
    assert both.vllm_mode == "auto" and not any("vllm_mode" in c for c in both.changes)
    with pytest.raises(UserError, match=r"3, but the plan runs 2 \(colocate\) or 1 \(server "
                                        r"mode\) training processes"):
        build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "auto",
                    "num_processes": 3}, {}, {}, site)
    with pytest.raises(UserError, match="but the plan runs 2 training processes"):
        build_spec({"model_name_or_path": "m", "nodes": 2, "num_processes": 1}, {}, {}, site)


def test_a_mistyped_server_share_under_auto_is_a_user_error() -> None:
    site = replace(find_site("sandbox-gpu"), partition="gpu-a")
    for bad in (None, "two"):
        with pytest.raises(UserError):
            build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "auto",
                        "vllm_server_gpus": bad, "num_processes": 2}, {}, {}, site)
