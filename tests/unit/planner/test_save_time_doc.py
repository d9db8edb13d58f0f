"""The 72B save-time table of docs/quickstart-cluster.md (#59), written from the planner's own
functions: the doc's figures are what this test computes, or it fails naming the stale table.
Regenerate: ``python -m tests.unit.planner.test_save_time_doc`` prints the block."""

from __future__ import annotations

import pytest

from hpc_grpo import api
from hpc_grpo.planner.checkpoint_size import GIB
from hpc_grpo.planner.save_time import plan_save, step_time
from hpc_grpo.planner.types import WriteFigure
from hpc_grpo.preflight import inputs
from tests.paths import REPO

DOC = REPO / "docs" / "quickstart-cluster.md"
BEGIN, END = "<!-- save-time-72b: begin -->", "<!-- save-time-72b: end -->"
BANDWIDTHS = (5.0, 20.0, 50.0)  # GB/s a node
SAVE_STEPS = (50, 500)  # hpc-grpo's default, and TRL's


def block() -> str:
    plan = api.prepare(api.Request(site="h100-pyxis", flags={
        "model": "Qwen/Qwen2.5-Math-72B", "nodes": 4})).plan
    assert plan.checkpoint is not None and plan.save is not None
    step, source = step_time(plan.memory, plan.server_plan)
    zero = plan.deepspeed.zero_stage if plan.deepspeed else 0
    lines = [BEGIN,
             f"`plan --site h100-pyxis --nodes 4 --model Qwen/Qwen2.5-Math-72B`: "
             f"{plan.checkpoint.one / GIB:.1f} GiB a checkpoint (ZeRO-{zero}, "
             f"{plan.world_size} ranks: {plan.checkpoint.partitioned / plan.world_size / GIB:.1f} GiB "
             f"a rank, {plan.save.node_bytes / 1e9:.1f} GB on the busiest node of "
             f"{plan.procs_per_node} ranks), {step:.1f} s/step {source}, signal_lead_s "
             f"{plan.signal_lead_s}.", "",
             "| write GB/s a node | save s | lead needed s | within the lead | training time "
             f"saving at save_steps {SAVE_STEPS[0]} | at {SAVE_STEPS[1]} |",
             "|---|---|---|---|---|---|"]
    for gbs in (*BANDWIDTHS, None):  # None: the plan's own, at the assumed figure
        save = plan.save if gbs is None else plan_save(
            plan.site, plan.spec, plan.checkpoint, (plan.world_size, plan.procs_per_node),
            WriteFigure(gbs, "declared", "declared"), (step, source), plan.signal_lead_s,
            plan.time_min)
        assert save is not None and (gbs is not None or not save.known)
        shares = [f"{100 * save.seconds / (every * step):.2f}%" for every in SAVE_STEPS]
        fits = "yes" if save.needed_s <= plan.signal_lead_s else "no"
        shown = f"{gbs:g}" if gbs is not None else f"{save.gbs:g} (assumed)"
        lines.append(f"| {shown} | {save.seconds:.1f} | {save.needed_s} | {fits} | "
                     f"{shares[0]} | {shares[1]} |")
    return "\n".join([*lines, END])


@pytest.fixture(autouse=True)
def cluster_sized_disk(monkeypatch: pytest.MonkeyPatch, hpc_home: object) -> None:
    """A cluster's scratch, and no cached measurement: the table is the model's alone."""
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))


def test_the_docs_72b_save_table_is_the_planners() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC.name} lost its save-time table"
    shipped = text[text.index(BEGIN):text.index(END) + len(END)]
    assert shipped == block(), ("docs/quickstart-cluster.md's 72B save table is stale: run "
                                "python -m tests.unit.planner.test_save_time_doc")


if __name__ == "__main__":
    print(block())
