"""export/evaluate.py without torch: the statistics, what is evaluated, the request's defaults
from run.json, and the result file `status` reads (a stand-in child gives the rewards)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from hpc_grpo.export import evaluate
from hpc_grpo.rundir import ledgers, workspace
from hpc_grpo.rundir.contract import block_dict
from hpc_grpo.rundir.ledgers import ExportLine
from hpc_grpo.runs import after_training, registry
from tests.unit.export import fakes


def test_interval_is_mean_plus_minus_1_96_standard_errors() -> None:
    got = evaluate.interval([1.0, 2.0, 3.0, 4.0])
    half = 1.959964 * math.sqrt((2.25 + 0.25 + 0.25 + 2.25) / 3 / 4)  # sample variance / n
    assert got.mean == 2.5 and got.n == 4
    assert got.low == pytest.approx(2.5 - half) and got.high == pytest.approx(2.5 + half)
    assert evaluate.interval([7.0]).low == evaluate.interval([7.0]).high == 7.0


def test_per_prompt_weights_rewards_and_averages_each_prompts_samples() -> None:
    rewards = [[1.0, 3.0, 0.0, None], [10.0, 10.0, 20.0, 20.0]]  # 2 rewards, 2 prompts x 2
    assert evaluate.per_prompt(rewards, [1.0, 0.5], prompts=2, samples=2) == [7.0, 10.0]
    assert evaluate.per_prompt(rewards, [], prompts=2, samples=2) == [12.0, 20.0]


def test_the_request_takes_the_runs_dataset_rewards_and_sampling(tmp_path: Path) -> None:
    fields: dict[str, Any] = {
        "dataset": {"name": "data.jsonl", "prompt_column": "q", "split": "train", "commit": "abc"},
        "reward_funcs": ["builtin:accuracy", "builtin:format"], "reward_weights": [1.0, 0.5],
        "reward_kwargs": {"builtin:format": {"x": 1}},
        "grpo_config": {"max_completion_length": 24, "temperature": 0.7}}
    record = fakes.record(**fields)
    subj = evaluate.Subject("/m", "", "step-2", tmp_path, 2)
    req = evaluate.request(subj, record, None, "test", (), 8, 2, 0)
    assert req["dataset"] == {**block_dict(record.dataset), "split": "test"}
    assert (req["reward_weights"], req["max_new_tokens"], req["temperature"]) == ([1.0, 0.5], 24, 0.7)
    other = evaluate.request(subj, record, "other.jsonl", None, ("builtin:format",), 8, 1, 0)
    assert other["dataset"]["name"] == "other.jsonl" and "commit" not in other["dataset"]
    assert other["reward_weights"] == [] and other["reward_kwargs"] == {"builtin:format": {"x": 1}}
    assert evaluate.request(subj, record, None, None, (), 8, 1, 0, max_new_tokens=5)["max_new_tokens"] == 5
    bare = evaluate.request(subj, None, "d.jsonl", None, ("builtin:length",), 8, 1, 0)
    assert bare["max_new_tokens"] == 256 and bare["temperature"] == 1.0  # TRL's defaults
    staged = evaluate.request(subj, fakes.record(**fields, model_load={"hf_home": "/hf"}), None, None,
                              (), 8, 1, 0)
    assert staged["dataset"]["name"] == "/hf/hub/datasets--data.jsonl/snapshots/abc"
    assert "commit" not in staged["dataset"]
    with pytest.raises(UserError, match="no reward functions"):
        evaluate.request(subj, fakes.record(dataset={"name": "d"}), None, None, (), 8, 1, 0)
    with pytest.raises(UserError, match="no dataset"):
        evaluate.request(subj, None, None, None, ("builtin:length",), 8, 1, 0)


def test_what_is_evaluated(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 2)
    fakes.checkpoint(run, 4)
    fakes.checkpoint(run, 6, "zero")

    def find(_: str) -> Path:
        return run

    assert evaluate.subject(str(run), 2, find)[0].model == str(run / "checkpoints" / "checkpoint-2")
    shards, _ = evaluate.subject(str(run), None, find)  # the newest complete one: shards only
    assert (shards.model, shards.layout) == (str(run / "checkpoints" / "checkpoint-6"), "zero")
    assert evaluate.request(shards, fakes.record(dataset={"name": "d"}, reward_funcs=["builtin:length"]),
                            None, None, (), 8, 1, 0)["layout"] == "zero"  # the child reads it so
    assert evaluate.subject(str(run), 2, find)[0].layout == ""
    exported = run / "export" / "step-6"
    exported.mkdir(parents=True)
    (run / "exports.jsonl").write_text(json.dumps({"step": 6, "path": str(exported),
                                                   "mode": "full"}) + "\n")
    earlier = run / "export" / "step-2"
    earlier.mkdir()
    with (run / "exports.jsonl").open("a") as handle:  # made last, of an earlier step
        handle.write(json.dumps({"step": 2, "path": str(earlier), "mode": "full"}) + "\n")
    subj, record = evaluate.subject(str(run), None, find)
    assert record is not None
    assert (subj.model, subj.label, record.run_id) == (str(exported), "export step-6", "tiny-0001")
    assert (ledgers.newest_export(run) or ExportLine()).step == 2  # what status shows: the last one made
    (exported / "config.json").write_text("{}")
    inside, record = evaluate.subject(str(exported), None, find)  # an export: its run's defaults
    assert record is not None
    assert (inside.model, inside.run_dir, record.run_id) == (str(exported), run, "tiny-0001")
    alone = tmp_path / "elsewhere" / "model"
    alone.mkdir(parents=True)
    (alone / "config.json").write_text("{}")
    folder, none = evaluate.subject(str(alone), None, find)  # a model folder of no run
    assert (folder.model, folder.run_dir, none) == (str(alone), None, None)


def test_a_folder_that_is_neither_a_run_nor_a_model_is_said_to_be_so(tmp_path: Path) -> None:
    """Issue #58: a model folder without config.json (a half copy, a tokenizer folder) was
    "no run 'DIR'"; it is now said what it is, and a name that is no path stays "no run"."""
    weights_only = tmp_path / "weights"
    weights_only.mkdir()
    (weights_only / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserError) as caught:
        evaluate.subject(str(weights_only), None, registry.find_run)
    assert caught.value.message == (f"{weights_only} is a folder but neither a run directory "
                                    "(no run.json) nor a model folder (no config.json or "
                                    "adapter_config.json)")
    with pytest.raises(UserError, match="no run 'grpo-nothing'"):
        evaluate.subject("grpo-nothing", None, registry.find_run)


FAKE = """#!{python}
import json, os, sys
from pathlib import Path
request = json.load(sys.stdin)
if os.environ.get("FAKE_ENV_OUT"):  # what the child was given, for the tests of where it writes
    Path(os.environ["FAKE_ENV_OUT"]).write_text(json.dumps(dict(os.environ)))
n, k = request["limit"], request["num_samples"]
values = [float(i // k) for i in range(n * k)]  # prompt p scores p on every sample
engine = "transformers" if request["engine"] == "transformers" else "vllm"  # as on a GPU site
Path(sys.argv[3]).write_text(json.dumps({{"ok": True, "prompts": n, "num_samples": k,
    "rewards": [values], "reward_names": request["reward_funcs"], "dataset": request["dataset"],
    "engine": engine, "engine_note": "" if engine == "vllm" else "asked",
    "tensor_parallel": request["tensor_parallel"],
    "example": {{"prompt": "Count on: 1 2", "completion": " 3 4"}}}}))
"""


def test_an_evaluation_is_written_under_the_run_and_shown_by_status(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    result = evaluate.evaluate(str(run), registry.find_run, limit=4, num_samples=3, python=str(fake))
    assert result.reward.mean == 1.5 and result.reward.n == 4  # prompts 0..3, samples averaged
    assert result.path.parent == run / "eval" and result.path.name.startswith("step-4-")
    saved = json.loads(result.path.read_text())
    assert saved["per_prompt"] == [0.0, 1.0, 2.0, 3.0] and saved["reward_funcs"] == ["builtin:length"]
    evaluation = ledgers.newest_eval(run)
    assert evaluation is not None
    line = after_training.eval_line(evaluation)
    assert line.startswith("eval of step-4 on builtin:digits: mean reward 1.5 +- ")
    assert line.endswith("(95% CI, 4 prompts x 3, vllm)")
    assert (saved["engine"], saved["tensor_parallel"], result.engine) == ("vllm", 1, "vllm")


def test_status_lines_survive_odd_files(tmp_path: Path) -> None:
    """status over many runs must not stop at one odd exports.jsonl or eval file."""
    run = fakes.run_dir(tmp_path)
    gone = run / "export" / "step-2"
    (run / "exports.jsonl").write_text('not json\n[1, 2]\n{"path": 7}\n'
                                       + json.dumps({"path": str(gone), "step": 2}) + "\n")
    assert ledgers.newest_export(run) is None  # the only well-formed line names a removed folder
    (run / "eval").mkdir()
    (run / "eval" / "a.json").write_text("{")
    (run / "eval" / "b.json").write_text(json.dumps({"time": 1, "reward": {"mean": "x"},
                                                     "subject": [], "dataset": "d"}))
    odd = ledgers.newest_eval(run)
    assert odd is not None and after_training.eval_line(odd).startswith("eval of ? on ?: mean reward ?")
    assert after_training.export_line(ExportLine.from_dict({"step": 2, "check": ["?"]})).startswith(
        "exported step 2 (None, None): ")


def test_the_engine_and_tp_go_to_the_child_and_its_answer_to_the_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = fakes.run_dir(tmp_path, vllm={"enabled": True, "tensor_parallel_size": 2})
    fakes.checkpoint(run, 4)
    subj = evaluate.Subject("/m", "", "step-4", run, 4)
    record = fakes.run_record(run)
    req = evaluate.request(subj, record, None, None, (), 8, 1, 0, engine="vllm")
    assert (req["engine"], req["tensor_parallel"]) == ("vllm", 2)  # the run's planned TP
    bare = evaluate.request(subj, None, "d.jsonl", None, ("builtin:length",), 8, 1, 0)
    assert (bare["engine"], bare["tensor_parallel"]) == ("auto", 1)  # a folder of no run
    sent: list[dict[str, Any]] = []

    def child_run(python: str, module: str, request: dict[str, Any], what: str,
                  work: Any) -> dict[str, Any]:
        sent.append(request)
        return {"ok": True, "prompts": 2, "num_samples": 1, "rewards": [[1.0, 2.0]],
                "reward_names": request["reward_funcs"], "dataset": request["dataset"],
                "engine": "transformers", "engine_note": "vLLM not used: no CUDA GPU here",
                "tensor_parallel": 1, "example": {}}

    monkeypatch.setattr(evaluate.child, "run", child_run)
    out = CliRunner().invoke(main, ["eval", str(run), "--limit", "2", "--engine", "transformers"])
    assert out.exit_code == 0, out.output
    assert sent[0]["engine"] == "transformers" and sent[0]["tensor_parallel"] == 2
    assert "generated through transformers (vLLM not used: no CUDA GPU here)" in out.output
    saved = ledgers.newest_eval(run)
    assert saved is not None
    assert (saved.engine, saved.engine_note) == ("transformers", "vLLM not used: no CUDA GPU here")
    assert after_training.eval_line(saved).endswith(", transformers)")
    out = CliRunner().invoke(main, ["eval", str(run), "--engine", "tgi"])
    assert out.exit_code == 2 and not sent[1:]


LIBRARY_DIRS = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "HF_DATASETS_CACHE", "HF_HOME",
                "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT", "MPLCONFIGDIR", "WANDB_DIR")


def _child_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the stand-in child writes its environment; the caller's own cache settings gone."""
    for key in LIBRARY_DIRS:
        monkeypatch.delenv(key, raising=False)
    out = tmp_path / "child-env.json"
    monkeypatch.setenv("FAKE_ENV_OUT", str(out))
    monkeypatch.setattr(workspace, "UNIX_SOCKET_ROOM", 1000)  # pytest's folders are deep ones
    return out


def test_the_eval_childs_temporaries_and_caches_are_the_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #58: the eval child's TMPDIR (torch inductor's cache defaults to TMPDIR/
    torchinductor_USER) and caches are the run's, as the ranks' are; its TMPDIR goes with it."""
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    dump = _child_env(tmp_path, monkeypatch)
    evaluate.evaluate(str(run), registry.find_run, limit=2, python=str(fake))
    env = json.loads(dump.read_text())
    assert Path(env["TMPDIR"]).parent == run / "tmp" and not Path(env["TMPDIR"]).exists()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(run.parent / ".compile-cache" / "inductor")
    assert env["HF_DATASETS_CACHE"] == str(run.parent / ".datasets-cache")  # shared, as training's
    assert env["MPLCONFIGDIR"].startswith(str(run)) and "HF_HOME" not in env
    monkeypatch.setenv("HF_HOME", "/shared/hf")  # a user's hub cache: its datasets/ wins
    evaluate.evaluate(str(run), registry.find_run, limit=2, python=str(fake))
    env = json.loads(dump.read_text())
    assert env["HF_HOME"] == "/shared/hf" and "HF_DATASETS_CACHE" not in env


def test_a_model_folder_of_no_run_is_evaluated_in_hpc_grpos_home_not_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hpc_home: Path) -> None:
    """Issue #58: before, ``eval FOLDER`` wrote ``FOLDER.eval/`` beside the user's model (which
    may be read-only, shared or about to be uploaded) and its child's files into /tmp."""
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    (mine / "model" / "config.json").write_text("{}")
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    dump = _child_env(tmp_path, monkeypatch)
    data = tmp_path / "d.jsonl"  # eval checks --dataset before the child, as submit does
    data.write_text('{"prompt": "1 + 1"}\n')
    result = evaluate.evaluate(str(mine / "model"), registry.find_run, dataset=str(data),
                               reward_funcs=("builtin:length",), limit=2, python=str(fake))
    assert sorted(p.name for p in mine.iterdir()) == ["model"]  # nothing beside the model
    assert sorted(p.name for p in (mine / "model").iterdir()) == ["config.json"]
    work = result.path.parent.parent
    assert work.parent == hpc_home / "evals" and work.name.startswith("model-")
    assert json.loads((work / "model.json").read_text()) == {"model": str(mine / "model")}
    env = json.loads(dump.read_text())
    assert Path(env["TMPDIR"]).parent == work / "tmp" and not Path(env["TMPDIR"]).exists()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(hpc_home / "evals" / ".compile-cache" / "inductor")
    assert env["HF_DATASETS_CACHE"] == str(hpc_home / "evals" / ".datasets-cache")
