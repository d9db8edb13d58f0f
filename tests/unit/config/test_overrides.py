"""Issue #27: a recipe written for a GPU cluster plans anywhere with command-line overrides only.

Precedence holds for every key, plan-owned ones included (flags > --set > recipe > defaults); a
refusal names the --set that fixes it; `plan` lists what the command line and the plan changed
from the recipe; what every rank would raise alike after the queue wait (flash-attention on a
CPU site, prompt + completion beyond the model's context) is refused on the login node.
Plan level: nothing is trained, the inputs probe is stubbed (its own tests run it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.preflight import inputs
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "recipes"
DEMO = FIXTURES / "open-r1-qwen2.5-1.5b-instruct-grpo-demo.yaml"
TRL_CLI = FIXTURES / "trl-cli-example-config.yaml"
# What makes open-r1's GPU demo a CPU smoke run: overrides only, the recipe unchanged.
CPU_OVERRIDES = ("--set", "bf16=false", "--set", "use_vllm=false",
                 "--set", "attn_implementation=sdpa", "--set", "max_prompt_length=128",
                 "--set", "max_completion_length=64", "--set", "report_to=none")


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """No inputs probe (a child python loading the dataset), no disk-dependent warning."""
    monkeypatch.setattr(inputs, "probe_inputs", lambda *a, **k: inputs.Probed())
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))


@pytest.fixture
def math_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "math.jsonl"
    path.write_text('{"prompt": "What is 1+1?", "solution": "2"}\n'
                    '{"prompt": "What is 2+3?", "solution": "5"}\n')
    return path


@pytest.fixture
def batch_site(tmp_path: Path) -> Path:
    """A CPU Slurm profile unlike the shipped ones (partition, counts, ports)."""
    path = tmp_path / "cpu-batch.yaml"
    path.write_text("description: a CPU partition of another cluster\nscheduler: slurm\n"
                    "partition: compute-long\ngpus_per_node: 0\ncpus_per_node: 48\n"
                    "procs_per_node: 4\nmax_time: '2-00:00:00'\nport_range: [40000, 40999]\n"
                    "output_root: ./runs\n")
    return path


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def plan_json(*args: str) -> dict:
    code, out, err = cli("plan", "--json", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("site", ["local", "batch"])
def test_open_r1_gpu_demo_plans_on_a_cpu_site_with_overrides_only(
        site: str, math_jsonl: Path, batch_site: Path) -> None:
    """The recipe unchanged: --set replaces its bf16 and use_vllm as any other key (both were
    refused as contradicting the plan, --set or not), its vllm_device is moot without vLLM, and
    the plan says in one block what changed from the recipe and why."""
    where = "local" if site == "local" else str(batch_site)
    plan = plan_json("--site", where, "--recipe", str(DEMO), "--model", "builtin:tiny",
                     "--dataset", str(math_jsonl), *CPU_OVERRIDES)
    assert plan["device"] == "cpu" and plan["vllm"]["enabled"] is False
    changed = plan["changed_from_recipe"]
    for line in ("model: Qwen/Qwen2.5-1.5B-Instruct -> builtin:tiny (--model)",
                 "bf16: true -> false (--set bf16=false)",
                 "use_vllm: true -> false (--set use_vllm=false)",
                 "attn_implementation: flash_attention_2 -> sdpa (--set attn_implementation=sdpa)",
                 "max_completion_length: 1024 -> 64 (--set max_completion_length=64)",
                 "report_to: [wandb] -> none (--set report_to=none)"):
        assert line in changed, changed
    assert any(line.startswith("vllm_device: auto dropped") for line in changed), changed
    assert any(line.startswith("dtype: bfloat16 -> float32") for line in changed), changed
    assert plan["precision"].startswith("fp32")
    code, out, err = cli("plan", "--site", where, "--recipe", str(DEMO), "--model",
                         "builtin:tiny", "--dataset", str(math_jsonl), *CPU_OVERRIDES)
    assert code == 0, err
    block = out[out.index("changed from the recipe:"):].splitlines()
    assert "  bf16: true -> false (--set bf16=false)" in block


def test_each_refusal_names_the_set_that_fixes_it(math_jsonl: Path) -> None:
    """Without overrides: every problem at once, each with its fix; and the fixes fix it."""
    code, _, err = cli("plan", "--site", "local", "--recipe", str(DEMO), "--model",
                       "builtin:tiny", "--dataset", str(math_jsonl))
    assert code == 2
    lines = err.strip().splitlines()
    hints = {"recipe: bf16": "--set bf16=false", "recipe: use_vllm": "--set use_vllm=false",
             "attn_implementation": "--set attn_implementation=sdpa"}
    for where, fix in hints.items():
        assert sum(where in line and fix in line for line in lines) == 1, (where, lines)
    # prompt + completion beyond the model's context, only once the rest is fixed (the plan)
    code, _, err = cli("plan", "--site", "local", "--recipe", str(DEMO), "--model",
                       "builtin:tiny", "--dataset", str(math_jsonl), *CPU_OVERRIDES[:6])
    assert code == 2
    assert "prompt 512 + completion 1024 = 1536 tokens, above the model's context of 512" in err
    assert "--set max_prompt_length=256 --set max_completion_length=256" in err
    # a --set that contradicts the plan is refused too, naming the --set that fixes it
    code, _, err = cli("plan", "--site", "local", "--recipe", str(DEMO), "--model",
                       "builtin:tiny", "--dataset", str(math_jsonl), *CPU_OVERRIDES,
                       "--set", "use_vllm=true")
    assert code == 2
    assert "--set: use_vllm: True contradicts the plan" in err
    assert "hint: --set use_vllm=false, or leave use_vllm out" in err


def test_trl_cli_recipe_on_another_cluster(batch_site: Path) -> None:
    """A second project's recipe (`trl grpo --config`): flags and --set win over it the same
    way, on a profile the suite was not written against."""
    plan = plan_json("--site", str(batch_site), "--recipe", str(TRL_CLI), "--model",
                     "builtin:tiny", "--set", "lr_scheduler_type=constant", "--set",
                     "learning_rate=0.001", "--set", "num_processes=4")
    assert plan["world_size"] == 4
    assert plan["changed_from_recipe"] == [
        "model: Qwen/Qwen2.5-0.5B -> builtin:tiny (--model)",
        "learning_rate: 0.0001 -> 0.001 (--set learning_rate=0.001)",
        "lr_scheduler_type: cosine -> constant (--set lr_scheduler_type=constant)"]
    code, _, err = cli("plan", "--site", str(batch_site), "--recipe", str(TRL_CLI), "--model",
                       "builtin:tiny", "--set", "num_processes=8", "--set", "fp16=true")
    assert code == 2
    assert "--set: num_processes: 8, but the plan runs 4" in err and "--set num_processes=4" in err
    assert "--set: fp16: True contradicts the plan" in err and "--set fp16=false" in err


def test_prompt_and_completion_beyond_the_models_context(tmp_path: Path) -> None:
    """A model folder whose config.json allows 256 positions: 32 (the built-in dataset's
    prompts) + 300 is refused before submit with the completion length that fits."""
    folder = tmp_path / "short-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300, "max_position_embeddings": 256, "tie_word_embeddings": True}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")  # weights: only their presence is read
    code, _, err = cli("plan", "--site", "local", "--model", str(folder), "--dataset",
                       "builtin:sums", "--set", "max_completion_length=300")
    assert code == 2
    assert "prompt 32 + completion 300 = 332 tokens, above the model's context of 256" in err
    assert "hint: --set max_completion_length=224" in err
    assert plan_json("--site", "local", "--model", str(folder), "--dataset", "builtin:sums",
                     "--set", "max_completion_length=224")["world_size"] == 2


def test_flash_attention_needs_the_package_in_the_sites_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU sites: the inputs probe (run with the site's python) asks for the flash-attn
    package; the probe runs for it even on a built-in dataset with smoke rewards."""
    import importlib.util

    from hpc_grpo.runtime.rank.inputs_probe import attention_problem

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flash_attn" else real(name, *a))
    line = attention_problem("flash_attention_2")
    assert "needs the flash_attn package" in line and "--set attn_implementation=sdpa" in line
    assert attention_problem("sdpa") == "" and attention_problem("") == ""
    from hpc_grpo.config.spec import JobSpec

    assert inputs.needs_probe(JobSpec(model="m", attn_implementation="flash_attention_2"))
    assert not inputs.needs_probe(JobSpec(model="m"))


def test_pure_bf16_only_when_asked_with_the_memory_plan_following(tmp_path: Path) -> None:
    """One GPU, no DeepSpeed: the recipe's dtype bfloat16 loads float32 (fp32 master weights,
    4 B/param in the memory plan); pure_bf16 halves the weights and warns."""
    common = ("--site", "sandbox-gpu", "--model", "Qwen/Qwen2.5-0.5B", "--zero-stage", "0",
              "--set", "dtype=bfloat16")
    mixed = plan_json(*common)
    pure = plan_json(*common, "--set", "pure_bf16=true")
    assert mixed["precision"].startswith("fp32 weights and Adam states, bf16 autocast")
    assert pure["precision"].startswith("pure bf16")
    weights = [p["memory_plan"]["breakdown_gib"]["training weights"] for p in (mixed, pure)]
    assert weights[0] == pytest.approx(2 * weights[1], rel=0.01)
    assert any("pure_bf16" in w for w in pure["warnings"])
    assert not any("pure_bf16" in w for w in mixed["warnings"])
    code, _, err = cli("plan", "--site", "local", "--model", "builtin:tiny", "--set",
                       "pure_bf16=true")
    assert code == 2 and "hint: --set pure_bf16=false" in err


def test_keys_a_recipe_may_not_set_are_taken_back_from_the_command_line(tmp_path: Path) -> None:
    """A plan-owned deepspeed file, DoRA and another tool's key: refused, each naming the --set
    that drops it; with those, the recipe plans unchanged and the block says what was dropped."""
    recipe = tmp_path / "accelerate-style.yaml"
    recipe.write_text(TRL_CLI.read_text() + "deepspeed: configs/zero3.json\nuse_dora: true\n"
                      "accelerate_config: configs/deepspeed_zero3.yaml\n")
    args = ("--site", "local", "--recipe", str(recipe), "--model", "builtin:tiny")
    code, _, err = cli("plan", *args)
    assert code == 2
    assert "recipe: deepspeed: 'deepspeed' is set by hpc-grpo" in err
    assert "--set deepspeed=null drops the recipe's" in err
    assert "'use_dora: True' is not supported" in err and "--set use_dora=false" in err
    assert "unknown key 'accelerate_config'" in err
    plan = plan_json(*args, "--set", "deepspeed=null", "--set", "use_dora=false",
                     "--set", "accelerate_config=null")
    assert plan["deepspeed"] is None
    changed = plan["changed_from_recipe"]
    assert "deepspeed: configs/zero3.json dropped (--set deepspeed=null)" in changed
    assert "accelerate_config: configs/deepspeed_zero3.yaml dropped (--set accelerate_config=null)" \
        in changed
    assert "use_dora: true -> false (--set use_dora=false)" in changed
    # null is a value for a field that takes one, never a way to drop a refused --set key
    code, _, err = cli("plan", "--site", "local", "--model", "builtin:tiny",
                       "--set", "deepspeed=x.json")
    assert code == 2 and "--set: deepspeed" in err and "drops the recipe's" not in err


def test_a_measured_prompt_longer_than_the_context_is_refused(
        monkeypatch: pytest.MonkeyPatch, math_jsonl: Path) -> None:
    """The issue's run: a dataset of 2,400-token prompts (as the login node's probe measures
    them with the model's tokenizer) on a 512-position model trained with transformers'
    "indexing errors" warning; now refused before submit."""
    monkeypatch.setattr(inputs, "probe_inputs", lambda *a, **k: inputs.Probed(longest_prompt=2400))
    code, _, err = cli("plan", "--site", "local", "--model", "builtin:tiny", "--dataset",
                       str(math_jsonl))
    assert code == 2
    assert "prompt 2400 + completion 256 = 2656 tokens, above the model's context of 512" in err
