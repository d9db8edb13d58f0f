"""LoRA on a math dataset, on this machine (#14): torchrun 1 node x 2 processes (gloo, CPU).

A local math JSONL with a solution column and a system prompt (chats through the tiny model's
chat template), math-verify accuracy, format, a length reward and a custom reward that needs
another column, LoRA with TRL's default dropout. A run stopped by SIGUSR2 mid-run and resumed
ends with adapter weights equal to an uninterrupted run's: the resume loaded the checkpoint's
adapter into the same adapter, not a second one on top. Three launches, about 50 s on 2 cores.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.slow.runtime_slow_helpers import metrics, node_cmd, run_node, signal_tree, state, write_run
from tests.slow.runtime_slow_helpers import node_env as env

pytestmark = pytest.mark.slow
STEPS = 6
REWARDS = ["builtin:accuracy", "builtin:format", "builtin:length", "tests.slow.math_reward:needs_level"]
PEFT = {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": [], "load_in_4bit": False}
SYSTEM = "Think in <think> tags, then give the answer in <answer> tags as \\boxed{}."


def math_rows(n: int = 16) -> list[dict[str, str]]:
    return [{"question": f"What is {a} + {a + 1}?", "answer": f"\\frac{{{2 * a + 1}}}{{1}}",
             "level": f"L{a % 3}"} for a in range(n)]


def lora_run(run_dir: Path, model: Path, data: Path) -> dict[str, Any]:
    return write_run(run_dir, model, steps=STEPS, reward_funcs=REWARDS,
                     reward_weights=[1.0, 1.0, 0.1, 1.0], peft=PEFT,
                     dataset={"name": str(data), "prompt_column": "question", "split": "train",
                              "solution_column": "answer", "system_prompt": SYSTEM,
                              "max_prompt_length": 96})


def adapter(run_dir: Path, step: int) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"checkpoint-{step}" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """(uninterrupted run, run stopped by SIGUSR2 and resumed, the step it stopped at)."""
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("lora")
    model = build_tiny_model(root / "model", seed=0)
    data = root / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in math_rows()))
    reference = root / "reference"
    lora_run(reference, model, data)
    proc = run_node(reference)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    stopped = root / "stopped"
    lora_run(stopped, model, data)
    node = subprocess.Popen(node_cmd(stopped), env=env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 90
    while len(metrics(stopped)) < 2 and node.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert node.poll() is None, "run ended before it could be signalled"
    signal_tree(node.pid, signal.SIGUSR2)
    out, _ = node.communicate(timeout=90)
    assert node.returncode == 0, out
    at = state(stopped)["step"]
    assert state(stopped)["phase"] == "interrupted" and 2 <= at < STEPS, state(stopped)
    again = run_node(stopped)
    assert again.returncode == 0, again.stdout + again.stderr
    return reference, stopped, at


def test_resumed_adapter_equals_the_uninterrupted_one(runs: tuple[Path, Path, int]) -> None:
    reference, stopped, at = runs
    st = state(stopped)
    assert st["phase"] == "done" and st["step"] == STEPS and st["resumed_from"].endswith(f"-{at}")
    ref, got, mid = adapter(reference, STEPS), adapter(stopped, STEPS), adapter(stopped, at)
    assert sorted(got) == sorted(ref) and len(ref) == 2 * 2 * 2  # 2 layers x q,v x lora_A,B: one adapter
    assert all(".lora_A." in k or ".lora_B." in k for k in ref)
    for key, tensor in ref.items():
        assert got[key].equal(tensor), f"{key} differs after the resume"
    # training went on after the resume: a second adapter stacked at step `at` would leave B
    # (zero at start) or the checkpoint's values in place; the last steps moved every B tensor
    assert any(not got[k].equal(mid[k]) for k in got if ".lora_B." in k)
    assert all(not ref[k].eq(0).all() for k in ref if ".lora_B." in k)  # B moved from LoRA's zeros
    checkpoint = stopped / "checkpoints" / f"checkpoint-{STEPS}"
    assert not (checkpoint / "model.safetensors").exists()  # only the adapter is saved
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (4, 8, 0.05)


def test_math_rewards_logged_every_step(runs: tuple[Path, Path, int]) -> None:
    reference, stopped, _ = runs
    rows = metrics(stopped)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        for name in ("accuracy", "format", "length", "needs_level"):
            assert f"rewards/{name}/mean" in row, row
        assert 0.0 <= row["rewards/accuracy/mean"] <= 1.0 and 0.0 <= row["rewards/format/mean"] <= 1.0
    assert [r["reward_mean"] for r in rows] == [r["reward_mean"] for r in metrics(reference)]
    grpo = json.loads((stopped / "grpo_config.json").read_text())
    assert grpo["reward_weights"] == [1.0, 1.0, 0.1, 1.0]


def test_lora_checkpoint_exports_merged_and_as_adapter(runs: tuple[Path, Path, int],
                                                       tmp_path: Path) -> None:
    """#28: the adapter merged into the base (peft merge_and_unload) and the adapter alone, each
    checked against base + adapter unmerged; no new training (the module's run)."""
    import sys

    from safetensors.torch import load_file

    from hpc_grpo.export import write

    reference = runs[0]
    merged = write.export(reference, to=str(tmp_path / "merged"), python=sys.executable)
    assert merged.error == "" and merged.plan.mode == "merged", merged.error
    assert merged.check["passed"] and merged.check["max_abs_diff"] < 1e-4
    base = load_file(str(Path(json.loads((reference / "run.json").read_text())["model"])
                         / "model.safetensors"))
    weights = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert sorted(weights) == sorted(base) and not any(".lora_" in k for k in weights)
    changed = [k for k in base if not weights[k].equal(base[k])]
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)

    adapter = write.export(reference, adapter=True, python=sys.executable)
    assert adapter.error == "" and adapter.check["max_abs_diff"] == 0.0, adapter.error
    folder = reference / "export" / f"step-{STEPS}-adapter"
    assert (folder / "adapter_config.json").exists() and (folder / "adapter_model.safetensors").exists()
    assert not (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
