"""A real user's math job on the real sandbox cluster (#14): 2 nodes x 2 ranks, LoRA, a local
math JSONL with a solution column and a system prompt, math-verify accuracy, format and a
(slow, 0.5 s) length reward, from a recipe written as open-r1's grpo.py / `trl grpo --config`
take it (model_name_or_path, dataset_name, dataset_prompt_column, reward_funcs by open-r1 name,
output_dir, TRL's LoRA keys). The login node measured the longest chat prompt and the plan used
it; `scancel --signal=USR2` mid-run checkpoints the adapter and the requeued job continues that
one adapter to the last step, logging every reward every step once, and ends with the adapter
an uninterrupted run of the same recipe (beside it, on the other two nodes) ends with, bit for bit.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.clusterlib import finished, submit, wait_for, wait_no_processes, wait_step

pytestmark = [pytest.mark.cluster, pytest.mark.whole_cluster,  # two 2-node runs at once
              pytest.mark.usefixtures("sandbox_cluster")]
STEPS = 6
SYSTEM = "Think in <think> tags, then answer in <answer> tags as \\boxed{}."
REWARDS = ["accuracy", "format", "tests.slow.slow_reward:slow_length"]  # open-r1's names


def write_job(tmp: Path) -> Path:
    data = tmp / "math.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {a} + {a}?", "answer": str(2 * a)})
                            + "\n" for a in range(16)))
    recipe = tmp / "math-lora.yaml"
    recipe.write_text(yaml.safe_dump({  # open-r1 / TRL key names; solution_column is hpc-grpo's
        "model_name_or_path": "builtin:tiny", "dataset_name": str(data),
        "dataset_prompt_column": "question", "solution_column": "answer",
        "system_prompt": SYSTEM, "reward_funcs": REWARDS, "reward_weights": [1.0, 1.0, 0.1],
        "use_peft": True, "lora_r": 4, "lora_alpha": 8, "output_dir": "data/tiny-grpo-math",
        "max_steps": STEPS, "learning_rate": 0.01, "per_device_train_batch_size": 4,
        "num_generations": 4, "max_completion_length": 24, "save_steps": 1000, "report_to": "none",
        "time": "00:10:00"}, sort_keys=False))
    return recipe


def adapter(run_dir: Path, step: int) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"checkpoint-{step}" / "adapter_model.safetensors"))


def test_lora_math_job_requeued_by_usr2_continues_one_adapter(tmp_path: Path) -> None:
    recipe = write_job(tmp_path)
    # The reference first: a submit measures the prompts on the login node, which took 27 s on a
    # busy machine, and the run to interrupt, submitted first, had meanwhile finished all 6 steps.
    ref_id, _, ref_dir = submit(tmp_path / "reference", "--site", "sandbox", "--nodes", "2",
                                "--recipe", str(recipe), "--partition", "low",
                                "--run-id", "lora-uninterrupted")  # a name of its own
    run_id, job, run_dir = submit(tmp_path / "runs", "--site", "sandbox", "--nodes", "2",
                                  "--recipe", str(recipe), "--partition", "low")
    wait_step(run_id, 2)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    row = wait_for(run_id, finished, timeout=300)
    assert row["state"] == "COMPLETED" and row["step"] == STEPS and row["requeues"] == 1, row
    ref = wait_for(ref_id, finished, timeout=300)
    assert ref["state"] == "COMPLETED" and ref["requeues"] == 0, ref

    restarts = [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()]
    at = restarts[0]["resumed_from_step"]
    assert restarts[0]["cause"] == "user signal" and 2 <= at < STEPS, restarts  # Slurm's record
    mid, end = adapter(run_dir, at), adapter(run_dir, STEPS)
    assert sorted(mid) == sorted(end) and len(end) == 8  # one adapter: 2 layers x q,v x A,B
    assert any(not end[k].equal(mid[k]) for k in end if ".lora_B." in k)  # trained on after it
    uninterrupted = adapter(ref_dir, STEPS)
    assert sorted(uninterrupted) == sorted(end)
    assert [k for k in end if not end[k].equal(uninterrupted[k])] == []  # the same adapter, to the bit

    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for m in metrics:
        assert 0.0 <= m["rewards/accuracy/mean"] <= 1.0 and 0.0 <= m["rewards/format/mean"] <= 1.0
        assert m["rewards/slow_length/mean"] <= 0.0

    # the plan's prompt bound is the longest chat prompt, measured on the login node
    run = json.loads((run_dir / "run.json").read_text())
    from hpc_grpo.runtime.models.tiny import load_tokenizer

    tok = load_tokenizer(run["model"])
    longest = max(len(tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {a}?"}],
        add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]) for a in range(16))
    assert run["dataset"]["max_prompt_length"] == longest
    assert run["peft"]["r"] == 4 and run["reward_weights"] == [1.0, 1.0, 0.1]
    deadline = time.monotonic() + 30
    while json.loads((run_dir / "state.json").read_text())["phase"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert wait_no_processes(str(run_dir)) == {}
