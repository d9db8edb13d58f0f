"""The rank's hooks: one protocol, one declared order, the test-only faults behind one hook that
the production list does not name."""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.runtime.rank import hooks
from hpc_grpo.runtime.rank.context import HookContext
from hpc_grpo.runtime.rank.faults import hang, stale_weights

RANK = Path(hooks.__file__).parent


def _ctx(tmp_path: Path, env: dict[str, str], rank: int = 0) -> HookContext:
    run = RunRecord.from_dict({"schema": 1, "run_id": "r1", "run_dir": str(tmp_path), "model": "m",
                               "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1})
    return HookContext(run=run, run_dir=tmp_path, rank=rank, env=env, attempt="a", resume=None,
                       resume_step=0)


def test_every_hook_takes_the_trainer_and_the_context() -> None:
    for hook in hooks.HOOKS:
        assert list(inspect.signature(hook).parameters) == ["trainer", "ctx"], hook.__module__
        assert hook.__name__ == "install"


def test_production_wiring_never_names_the_faults() -> None:
    """No rank module outside faults/ imports it; hooks.py names it once, as a string."""
    for path in RANK.rglob("*.py"):
        if "faults" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names]
                assert not any("faults" in n for n in names), path
    assert hooks.for_env({}) == hooks.HOOKS
    assert hooks.for_env({"HPC_GRPO_FAULT_HANG_RANK": "0"})[:-1] == hooks.HOOKS


def test_the_faults_hook_wraps_the_first_reward_and_the_push(tmp_path: Path) -> None:
    def accuracy(**_: Any) -> list[float]:
        return [1.0]

    walk = types.SimpleNamespace(_iter_named_params=lambda: iter(()))
    trainer = types.SimpleNamespace(reward_funcs=[accuracy], vllm_generation=walk)
    env = {hang.RANK_ENV: "0", hang.STEP_ENV: "3", stale_weights.FAULT_ENV: "1"}
    faults_hook = hooks.for_env(env)[-1]
    assert faults_hook(trainer, _ctx(tmp_path, env)) == [stale_weights.NOTE]
    assert trainer.reward_funcs[0] is not accuracy and trainer.reward_funcs[0].__name__ == "accuracy"
    assert isinstance(walk._iter_named_params, stale_weights.FirstPushForever)
    assert stale_weights.NOTE in rundir.load_state(tmp_path).notes

    other = types.SimpleNamespace(reward_funcs=[accuracy], vllm_generation=None)
    assert faults_hook(other, _ctx(tmp_path, {hang.RANK_ENV: "1", hang.STEP_ENV: "3"})) == []
    assert other.reward_funcs == [accuracy]  # the fault is rank 1's
