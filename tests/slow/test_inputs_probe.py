"""The login-node inputs check (#14): rewards imported and called on the first row and the
dataset's longest prompt measured, in a child process with the site's python, before submit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from tests.paths import REPO
from tests.unit.cli.cli_errors_helpers import assert_refused, fake_slurm  # noqa: F401 (fixture)
from tests.unit.slurmfake import FakeSlurm

MATH = [{"problem": f"What is {i} + {i}? Put the answer in a box.", "solution": str(2 * i)}
        for i in range(8)]
MATH[3]["problem"] = "A much longer question, to be the longest one: " + "one two three " * 6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hpc_grpo.runtime.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's working directory: a math JSONL and a reward module importable from it."""
    (tmp_path / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MATH))
    (tmp_path / "probe_user_rewards.py").write_text(
        "def needs_level(completions, level, **kw):\n    return [1.0] * len(completions)\n"
        "def fine(completions, solution, **kw):\n    return [float(s == '0') for s in solution]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def recipe(workdir: Path, model: str, **extra: object) -> str:
    body = {"model": model, "dataset": str(workdir / "math.jsonl"), "prompt_column": "problem",
            "solution_column": "solution", "reward_funcs": ["builtin:accuracy", "builtin:format"],
            "max_steps": 2, **extra}
    path = workdir / "recipe.yaml"
    path.write_text(json.dumps(body))  # JSON is YAML
    return str(path)


def submit(workdir: Path, *args: str) -> tuple[int, str, Path]:
    root = workdir / "runs"
    result = CliRunner().invoke(main, ["submit", "--output-root", str(root), "--site", "sandbox",
                                       *args], catch_exceptions=False)
    return result.exit_code, result.stderr, root


@pytest.mark.parametrize(("extra", "words"), [
    ({"reward_funcs": ["builtin:accuracy", "probe_user_rewards:needs_level"]},
     ("reward_funcs", "'probe_user_rewards:needs_level' failed on the dataset's first row",
      "TypeError", "level")),
    ({"solution_column": ""}, ("builtin:accuracy compares with the reference answer",
                               "no column 'solution'")),
    ({"reward_kwargs": {"builtin:format": {"strict": True}}},
     ("reward_kwargs for 'builtin:format': unexpected strict",)),
    ({"reward_weights": [1.0, 2.0, 3.0]}, ("reward_weights: 3 weights for 2 rewards",)),
    ({"prompt_column": "question", "dataset": "math.parquet"},  # the launcher cannot read Parquet
     ("dataset", "no prompt column 'question'", "problem, solution")),
])
def test_a_problem_the_ranks_would_hit_is_one_line_and_nothing_is_submitted(
        workdir: Path, fake_slurm: FakeSlurm,  # noqa: F811 (the fixture imported above)
        extra: dict[str, object], words: tuple[str, ...]) -> None:
    if extra.get("dataset") == "math.parquet":
        import datasets

        datasets.Dataset.from_list(MATH).to_parquet(str(workdir / "math.parquet"))
        extra = {**extra, "dataset": str(workdir / "math.parquet")}
    body = recipe(workdir, "builtin:tiny", **extra)
    if extra.get("solution_column") == "":
        data = workdir / "math.jsonl"  # no solution column at all, and none named
        data.write_text("".join(json.dumps({"problem": r["problem"], "answer": r["solution"]}) + "\n"
                                for r in MATH))
    code, err, root = submit(workdir, "--recipe", body)
    assert_refused(code, err, root, fake_slurm, *words)


def test_measured_longest_prompt_sizes_the_plan(workdir: Path, tiny: Path) -> None:
    from hpc_grpo.runtime.models.tiny import load_tokenizer

    tok = load_tokenizer(tiny)
    system = "Think in <think> tags, then answer in <answer> tags."
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": r["problem"]}]
             for r in MATH]
    longest = max(len(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"]) for c in chats)
    request = api.Request(site="local", recipe=recipe(workdir, str(tiny), system_prompt=system),
                          python=sys.executable, output_root=str(workdir / "runs"))
    prepared = api.prepare(request)
    assert prepared.plan.spec.max_prompt_length == longest
    record = prepared.plan.run_record("r", "/r")
    assert record.dataset.max_prompt_length == longest and record.dataset.system_prompt == system
    # a bound the user set below the real longest prompt is refused before submit
    low = api.Request(site="local", recipe=recipe(workdir, str(tiny), max_prompt_length=longest - 1,
                                                  system_prompt=system), python=sys.executable)
    with pytest.raises(UserError, match=f"a prompt of {longest} tokens .* above max_prompt_length "
                                        f"{longest - 1}"):
        api.prepare(low)


def test_no_training_stack_here_is_a_note_not_a_failure(workdir: Path, tiny: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bare = Path(sys.base_prefix) / "bin" / "python3"  # hpc_grpo on its path, no datasets/torch
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    prepared = api.prepare(api.Request(site="local", recipe=recipe(workdir, str(tiny)),
                                       python=str(bare)))
    assert any("has no training stack" in w and "not checked" in w for w in prepared.plan.warnings)
    assert "# warning: " in prepared.summary  # what plan/render/submit --dry-run print
    missing = api.prepare(api.Request(site="local", recipe=recipe(workdir, str(tiny)),
                                      python=str(workdir / "no-such-python")))
    assert any("cannot run" in w for w in missing.plan.warnings)


def test_the_readme_job_runs_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built-in dataset and smoke rewards: nothing to learn, no child process."""
    from hpc_grpo.preflight import inputs

    def forbidden(*_: object, **__: object) -> None:
        raise AssertionError("probe started")

    monkeypatch.setattr(inputs, "call_child", forbidden)
    prepared = api.prepare(api.Request(site="local", recipe="recipes/tiny-cpu.yaml"))
    assert prepared.plan.warnings == () or all("not checked" not in w for w in prepared.plan.warnings)
    assert os.path.basename(prepared.plan.spec.dataset).startswith("builtin:")
