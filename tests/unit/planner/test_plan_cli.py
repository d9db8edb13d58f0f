"""`hpc-grpo plan`: the plan render and submit use, shown with its reasons; bad requests exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.planner import arch_from_config, catalogue_names
from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.preflight import inputs
from hpc_grpo.rundir.shapes import SHAPES

BIG = ["--site", "h100-pyxis", "--model", "Qwen2.5-Math-72B", "--nodes", "4",
       "--set", "max_completion_length=2048", "--set", "per_device_train_batch_size=8",
       "--set", "num_generations=8", "--set", "max_prompt_length=512"]



@pytest.fixture(autouse=True)
def cluster_sized_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """These plans are for clusters, not this machine: the output file system's free space is
    a cluster's scratch (1 PiB), so no warning depends on this machine's disk."""
    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "the output file system"))

def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["plan", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_json_is_the_plan_submit_uses() -> None:
    code, out, _ = invoke(*BIG, "--json")
    assert code == 0
    data = json.loads(out)
    memory = data["memory_plan"]
    assert (memory["tensor_parallel_size"], memory["zero_stage"]) == (8, 3)
    assert memory["offload_optimizer"] is True and memory["offload_params"] is False
    assert memory["enable_sleep_mode"] is True and memory["gradient_checkpointing"] is True
    assert (memory["max_num_seqs"], memory["vllm_max_model_length"]) == (64, 2560)
    assert set(memory["reasons"]) >= {"tensor_parallel_size", "zero_stage", "offload_optimizer",
                                      "vllm_gpu_memory_utilization", "enable_sleep_mode"}
    assert memory["breakdown_gib"]["total during training"] <= 80
    prepared = api.prepare(api.Request(site="h100-pyxis", sets=tuple(BIG[7::2]),
                                       flags={"model": "Qwen2.5-Math-72B", "nodes": 4}))
    record = prepared.plan.run_record(prepared.run_id, str(prepared.run_dir)).to_dict()
    assert memory == record["memory_plan"]
    assert data["vllm"] == record["vllm"] and data["deepspeed"] == record["deepspeed"]
    assert data["world_size"] == 32 and data["no_memory_plan"] is None
    # what the ranks compare with their nodes before the model loads (rundir/hardware.py)
    hardware = record["hardware"]
    assert (hardware["gpus_per_node"], hardware["gpu_memory_gib"],
            hardware["cpu_memory_gib"]) == (8, 80, 1800)


def test_table_shows_choices_reasons_and_memory() -> None:
    code, out, _ = invoke(*BIG)
    assert code == 0
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines() if line.strip()}
    assert lines["TP size"].split()[2] == "8"
    assert lines["ZeRO stage"].split()[2] == "3"
    assert "True" in lines["optimizer offload"] and "Adam states" in lines["optimizer offload"]
    assert "True" in lines["sleep mode"] and "level 2 sleep" in lines["sleep mode"]
    for label in ("param offload", "gradient checkpointing", "vllm_gpu_memory_utilization",
                  "max_num_seqs", "vllm_max_model_length", "total during training", "KV cache"):
        assert label in lines, label
    assert "world size 32" in out


def test_impossible_request_is_one_line_with_the_smallest_change() -> None:
    code, out, err = invoke("--site", "lmod-apptainer", "--model", "Qwen2.5-Math-72B", "--nodes", "1")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model: ")
    assert "does not fit" in lines[0] and "(hint: " in lines[0] and "smallest" in lines[0]


def test_cpu_site_has_no_gpu_memory_plan() -> None:
    code, out, _ = invoke("--site", "sandbox", "--model", "builtin:tiny", "--nodes", "2")
    assert code == 0
    assert "no GPU memory plan" in out and "no GPUs" in out and "world size 4" in out
    data = json.loads(invoke("--site", "sandbox", "--model", "builtin:tiny", "--json")[1])
    assert data["memory_plan"] is None and "gloo" in data["no_memory_plan"]
    assert data["deepspeed"] is None and data["vllm"]["enabled"] is False


def test_server_mode_has_a_trainer_memory_plan_and_what_the_server_gets() -> None:
    """Server mode (#30; #12 said only that it had none): the trainer GPU's memory (no engine,
    the whole batch's activations), the server's share, the predicted step, the reserve-growth
    warning (no allocator hook: the runtime sets none); no colocated plan that would not apply."""
    args = ["--site", "h100-pyxis", "--model", "Qwen2.5-Math-7B", "--nodes", "2",
            "--vllm-mode", "server"]
    code, out, _ = invoke(*args, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["memory_plan"] is None and data["vllm"]["mode"] == "server"
    share = data["vllm"]["gpu_memory_utilization"]
    assert f"`vllm serve` gets {share} of its GPUs" in data["no_memory_plan"]
    server = data["server_plan"]
    assert server["trainer_gpu_gib"]["total during training"] > server["trainer_gpu_gib"]["gradients"]
    assert server["server_gpu_gib"]["vLLM share"] == pytest.approx(share * 80, abs=0.1)
    assert server["s_per_step"] > 0 and "server_trainer_alloc_conf" not in server
    warning = next(w for w in data["warnings"] if w.startswith("server mode: the trainer GPU"))
    assert "74.8 GiB reserved" in warning and "22.9 GiB" in warning and "not measured" in warning
    assert "PYTORCH_CUDA_ALLOC_CONF" not in warning
    code, text, _ = invoke(*args)
    assert code == 0 and "server mode: predicted" in text and "trainer GPU: gradients" in text
    colocated = json.loads(invoke(*args[:-2], "--json")[1])
    assert colocated["memory_plan"] is not None and colocated["no_memory_plan"] is None


def test_server_mode_with_optimizer_offload_shows_the_trainer_node_s_cpu_memory() -> None:
    args = ["--site", "h100-pyxis", "--model", "builtin:qwen2-7b", "--vllm-mode", "server",
            "--zero-stage", "3", "--set", "offload_optimizer=true"]
    code, out, _ = invoke(*args, "--json")
    assert code == 0
    server = json.loads(out)["server_plan"]
    assert server["problem"] == "" and server["trainer_gpu_gib"]["optimizer states"] == 0
    assert server["trainer_node_cpu_gib"] > 0
    code, text, _ = invoke(*args)
    assert code == 0 and "trainer node: CPU memory" in text
    assert "does not fit" not in text.split("server mode: predicted")[1].splitlines()[0]


@pytest.mark.parametrize(("extra", "words"), [
    (["--set", "offload_optimizer=true"], "offload_optimizer needs DeepSpeed ZeRO"),
    (["--zero-stage", "0", "--set", "offload_optimizer=true"], "offload_optimizer needs DeepSpeed ZeRO"),
    (["--zero-stage", "1"], "zero_stage 1 is not supported"),
])
def test_server_mode_refuses_what_its_trainers_would_not_run(extra: list[str], words: str) -> None:
    """Offload without ZeRO (the runtime writes no DeepSpeed block, so nothing would move) and
    ZeRO-1, refused in one line as the colocated plan refuses them."""
    code, out, err = invoke("--site", "h100-pyxis", "--model", "builtin:qwen2-7b",
                            "--vllm-mode", "server", *extra)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert words in lines[0] and "(hint: " in lines[0]


def test_list_models() -> None:
    code, out, _ = invoke("--list-models")
    assert code == 0 and out.splitlines() == list(catalogue_names())
    assert json.loads(invoke("--list-models", "--json")[1]) == list(catalogue_names())


def test_prompt_bound_comes_from_the_builtin_dataset_unless_set(tmp_path: Path) -> None:
    small = ["--site", "h100-pyxis", "--model", "Qwen2.5-1.5B", "--json",
             "--set", "max_completion_length=256"]
    code, out, _ = invoke(*small)
    assert code == 0
    data = json.loads(out)
    assert data["memory_plan"]["vllm_max_model_length"] == 32 + 256  # builtin:digits' bound
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "a long question"}\n')
    code, out, _ = invoke(*small, "--set", "max_prompt_length=1000", "--dataset", str(prompts))
    assert code == 0, out
    assert json.loads(out)["memory_plan"]["vllm_max_model_length"] == 1256


def test_recipe_recomputation_and_reference_model_are_counted() -> None:
    """gradient_checkpointing=False and beta > 0 from the recipe change the plan's memory."""
    small = ["--site", "h100-pyxis", "--model", "Qwen2.5-1.5B", "--set", "max_prompt_length=512",
             "--json"]

    def memory(*sets: str) -> dict[str, object]:
        code, out, err = invoke(*small, *(x for s in sets for x in ("--set", s)))
        assert code == 0, err
        return json.loads(out)["memory_plan"]

    default, no_gc = memory("gradient_checkpointing=true"), memory("gradient_checkpointing=false")
    kl = memory("gradient_checkpointing=true", "beta=0.04")
    assert default["gradient_checkpointing"] is True and no_gc["gradient_checkpointing"] is False
    assert default["reasons"]["gradient_checkpointing"].startswith("True: set by you")
    assert no_gc["reasons"]["gradient_checkpointing"].startswith("False: set by you")
    assert no_gc["breakdown_gib"]["activations"] > 2 * default["breakdown_gib"]["activations"]
    assert "reference model" not in default["breakdown_gib"]
    assert kl["breakdown_gib"]["reference model"] > 0


def test_tp_on_a_cpu_site_is_explained_in_one_line(tmp_path: Path) -> None:
    """No vLLM on CPU: TP 2 only groups ranks (the sandbox's TP test relies on the groups)."""
    args = ["--site", "sandbox", "--model", "Qwen/Qwen2.5-0.5B", "--nodes", "3",
            "--procs-per-node", "2", "--tp", "2", "--output-root", str(tmp_path)]
    for command in (["render"], ["submit", "--dry-run"]):
        out = CliRunner().invoke(main, [*command, *args])
        assert out.exit_code == 0, out.output
        warned = [line for line in out.output.splitlines() if "tensor_parallel_size 2" in line]
        assert warned == ["# warning: tensor_parallel_size 2 on CPU site 'sandbox' only groups "
                          "ranks (vLLM seed rank // 2): no vLLM runs on CPU, each process "
                          "generates alone with transformers"], out.output
    plan = json.loads(CliRunner().invoke(main, ["plan", "--json", *args]).output)
    # (the other warning: the sandbox profile does not say its nodes are offline, and the hub
    # model is not staged)
    tp = [w for w in plan["warnings"] if "tensor_parallel_size" in w]
    assert len(tp) == 1 and plan["tensor_parallel_size"] == 2
    one = CliRunner().invoke(main, ["render", *[a if a != "--tp" else "--seed" for a in args]])
    assert one.exit_code == 0 and "# warning: tensor" not in one.output  # TP 1: nothing to explain


def test_a_builtin_shape_is_planned_before_its_files_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #29: `plan --model builtin:qwen2-7b` on a fresh home (nothing written yet) plans
    from the shape table, with the arch the written config.json will give."""
    from transformers import Qwen2Config  # imported here: transformers takes seconds to load

    monkeypatch.setenv("HPC_GRPO_HOME", str(tmp_path / "home"))
    code, out, err = invoke("--site", "h100-pyxis", "--model", "builtin:qwen2-7b", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["no_memory_plan"] is None and data["memory_plan"]["tensor_parallel_size"] >= 1
    assert data["checkpoint"]["one_gib"] > 70  # 6.65 B parameters, full fine-tuning
    assert not (tmp_path / "home" / "models").exists()  # planning wrote nothing
    for name, shape in SHAPES.items():
        if not shape.vocab_size:
            assert builtin_arch(name) is None  # tiny: the tokenizer's vocabulary
            continue
        written = Qwen2Config(  # what runtime/models/tiny.write_qwen2 writes
            vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
            intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_hidden_layers,
            num_attention_heads=shape.num_attention_heads,
            num_key_value_heads=shape.num_key_value_heads,
            max_position_embeddings=shape.max_position_embeddings, tie_word_embeddings=True)
        assert builtin_arch(name) == arch_from_config(written.to_dict(), name), name


def test_auto_does_not_pick_a_server_layout_server_mode_would_refuse() -> None:
    """Offload with the ZeRO stage left to the plan: the colocated plan picks a stage that
    offloads; server mode's trainers would run ZeRO 0 and refuse it, so auto colocates."""
    code, out, err = invoke("--site", "h100-pyxis", "--model", "builtin:qwen2-1.5b", "--vllm-mode",
                            "auto", "--set", "offload_optimizer=true", "--json")
    assert code == 0, err
    data = json.loads(out)
    note = next(w for w in data["warnings"] if w.startswith("vllm_mode auto"))
    assert data["vllm"]["mode"] == "colocate" and data["memory_plan"]["offload_optimizer"]
    assert "server mode: offload_optimizer needs DeepSpeed ZeRO" in note, note
