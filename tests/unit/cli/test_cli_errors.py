"""Bad input: one line naming the field, a hint, exit code 2, no job, no run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.names import check_job_name
from hpc_grpo.errors import UserError
from hpc_grpo.planner.blocks import default_name
from hpc_grpo.preflight import builtin_model, inputs
from tests.unit.cli.cli_errors_helpers import assert_refused
from tests.unit.cli.cli_errors_helpers import fake_slurm as fake_slurm  # noqa: F401, F811 (a fixture)
from tests.unit.slurmfake import FakeSlurm


def run(tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    root = tmp_path / "runs"
    result = CliRunner().invoke(
        main, ["submit", "--output-root", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stderr, root


def test_unknown_profile_key(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("partition: debug\naccount_name: x\n")
    code, err, root = run(tmp_path, "--site", str(bad), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, "account_name", "did you mean 'account'")


def test_missing_model(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox")
    assert_refused(code, err, root, fake_slurm, "model", "hint")


def test_more_nodes_than_partition(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny", "--nodes", "9")
    assert_refused(code, err, root, fake_slurm, "nodes", "partition 'debug' has 4")


def test_tp_not_dividing(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--procs-per-node", "4", "--tp", "3")
    assert_refused(code, err, root, fake_slurm, "tensor_parallel_size", "does not divide")


def test_recipe_does_not_parse(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: builtin:tiny\nlearning_rate: [0.1\n")
    code, err, root = run(tmp_path, "--site", "sandbox", "--recipe", str(recipe))
    assert_refused(code, err, root, fake_slurm, "recipe", "does not parse")


def test_unknown_grpo_field(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--set", "num_generation=4")
    assert_refused(code, err, root, fake_slurm, "num_generation", "num_generations")


def test_model_path_missing(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", str(tmp_path / "nope"))
    assert_refused(code, err, root, fake_slurm, "model", "does not exist")


def test_model_folder_without_tokenizer(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", str(folder))
    assert_refused(code, err, root, fake_slurm, "no tokenizer")


def test_model_folder_without_weights(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", str(folder))
    assert_refused(code, err, root, fake_slurm, "has no weights")


def test_a_deepspeed_checkpoint_as_the_model_is_refused_with_the_export_command(
        tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """A full-parameter ZeRO checkpoint (its weights are DeepSpeed's shards alone, e740f2f) given
    as the model of a new run: the line names the export that makes it loadable."""
    run_dir = tmp_path / "grpo-old-0001"
    folder = run_dir / "checkpoints" / "checkpoint-40"
    (folder / "global_step40").mkdir(parents=True)
    (folder / "global_step40" / "mp_rank_00_model_states.pt").write_bytes(b"x")
    (folder / "latest").write_text("global_step40")
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    for name in ("training_args.bin", "scheduler.pt", "rng_state_0.pth", "trainer_state.json"):
        (folder / name).write_bytes(b"x")  # what every Trainer checkpoint holds beside
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", str(folder))
    assert_refused(code, err, root, fake_slurm, "DeepSpeed checkpoint", "ZeRO shards",
                   f"hpc-grpo export {run_dir} --step 40")
    (folder / "model.safetensors").write_bytes(b"")  # a model file beside them: a model folder
    code, err, _ = run(tmp_path, "--site", "sandbox", "--model", str(folder))
    assert "DeepSpeed checkpoint" not in err and "has no weights" not in err


def test_reward_that_does_not_import(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--reward", "no_such_module_xyz:reward")
    assert_refused(code, err, root, fake_slurm, "reward_funcs", "does not import")


def test_dataset_without_prompt_column(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "1+1"}\n')
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--dataset", str(data))
    assert_refused(code, err, root, fake_slurm, "prompt", "question")


def test_generation_batch_not_divisible(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--set", "per_device_train_batch_size=3", "--set", "num_generations=4")
    assert_refused(code, err, root, fake_slurm, "num_generations")


def test_job_name_with_metacharacters(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--name", "x; rm -rf /")
    assert_refused(code, err, root, fake_slurm, "name", "#SBATCH")


def test_site_name_with_a_line_break(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """The profile's name goes into the script's header comment: its line break rendered a
    command above the #SBATCH lines and sbatch took the job. Refused, naming the profile."""
    bad = tmp_path / "evil.yaml"
    bad.write_text(f'name: "evil\\ntouch {tmp_path}/pwned #"\nscheduler: slurm\npartition: debug\n')
    code, err, root = run(tmp_path, "--site", str(bad), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, "evil.yaml: name", "line break")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("run_id", ["{tmp}/outside/deep/x", "../../sibling/x", "a/b", "..",
                                    "nl\n", "my run", "a" * 300])
@pytest.mark.parametrize("command", ["submit", "render"])
def test_run_id_that_is_not_one_directory_name(tmp_path: Path, fake_slurm: FakeSlurm,
                                               run_id: str, command: str) -> None:
    """A run id names one directory under the output root: a path in it put the run elsewhere
    (and made its parents: /abs/x, ../../sibling/x, a/b under runs/a) before a FileNotFoundError
    traceback; 300 characters gave 'File name too long'; 'nl\\n' was submitted into a directory
    whose name ended in a newline. Refused in one line naming --run-id, nothing created."""
    run_id = run_id.format(tmp=tmp_path)
    root = tmp_path / "out" / "runs"
    result = CliRunner().invoke(main, [command, "--site", "sandbox", "--model", "builtin:tiny",
                                       "--output-root", str(root), "--run-id", run_id],
                                catch_exceptions=False)
    assert_refused(result.exit_code, result.stderr, root, fake_slurm, "--run-id:",
                   "is too long" if len(run_id) > 200 else "is not a run id")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-bin", "fake-state"]


@pytest.mark.parametrize(("given", "origin"), [
    (("--name", "my job"), "--name:"),
    (("--name", "a/b"), "--name:"),
    (("--name", "x" * 300), "--name:"),
    (("--set", "name=../../x"), "--set: name:"),
    (("--recipe", "RECIPE"), "recipe: name:"),
])
def test_a_bad_job_name_is_blamed_on_where_it_was_given(
        tmp_path: Path, fake_slurm: FakeSlurm, given: tuple[str, str], origin: str) -> None:
    """Run ids are made from the job name (NAME-0001): 'my job' was reported as 'output_root:
    .../my job-0001 cannot go into an #SBATCH line', 'a/b' nested the run under runs/a and 300
    characters raised 'File name too long'. Refused in one line naming --name, --set or the
    recipe, whichever gave it."""
    if given[1] == "RECIPE":
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text("name: my job\n")
        given = (given[0], str(recipe))
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny", *given)
    assert_refused(code, err, root, fake_slurm, f"error: {origin}", "job name")
    assert "output_root" not in err


def test_a_default_job_name_is_ascii() -> None:
    """The name made from a model folder when --name is not given keeps ASCII letters only:
    'modèle' made 'grpo-modèle', which the script refused as if the user had given it."""
    assert default_name("/models/Modèle-7B") == "grpo-mod-le-7b"
    assert check_job_name(default_name("/models/模型")) == "grpo---"


def test_time_over_site_maximum(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny",
                          "--time", "10:00:00")
    assert_refused(code, err, root, fake_slurm, "time", "maximum")


@pytest.mark.parametrize("command", ["submit", "render", "plan"])
@pytest.mark.parametrize("time", ["0", "0:0", "00:00:00"])
def test_a_zero_time_limit_is_refused(tmp_path: Path, fake_slurm: FakeSlurm, command: str,
                                      time: str) -> None:
    """``--time=0`` is no limit to Slurm (it once rendered ``#SBATCH --time=00:00:00``)."""
    root = tmp_path / "runs"
    result = CliRunner().invoke(main, [command, "--site", "sandbox", "--model", "builtin:tiny",
                                       "--output-root", str(root), "--time", time])
    assert_refused(result.exit_code, result.stderr, root, fake_slurm, "time", "no limit", "hint")
    assert "--time" not in result.output


@pytest.mark.parametrize(("line", "words"), [
    ("cpus_per_node: -4", ("mycluster.yaml: cpus_per_node", "positive integer, got -4", "hint")),
    ("signal_lead_s: -5", ("mycluster.yaml: signal_lead_s", "got -5")),
    ("env: {PATH: null}", ("mycluster.yaml: env.PATH", "got None", "hint")),
    ("max_nodes: -3", ("mycluster.yaml: max_nodes", "got -3")),
])
def test_bad_profile_numbers_are_refused_naming_the_key(tmp_path: Path, fake_slurm: FakeSlurm,
                                                        line: str, words: tuple[str, ...]) -> None:
    """Once rendered as #SBATCH --cpus-per-task=-4, --signal=USR2@-5 and export PATH=None."""
    site = tmp_path / "mycluster.yaml"
    site.write_text(f"partition: debug\ncpu_memory_gib: 8\n{line}\n")
    code, err, root = run(tmp_path, "--site", str(site), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, *words)


@pytest.mark.parametrize(("missing", "kept"), [("cpu_memory_gib", "gpu_memory_gib: 80"),
                                               ("gpu_memory_gib", "cpu_memory_gib: 500")])
@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_a_gpu_profile_without_its_memory_names_the_profile_key(
        tmp_path: Path, fake_slurm: FakeSlurm, missing: str, kept: str, mode: str) -> None:
    """The memory plan's own check named cpu_memory_gib_per_node, which no profile has, with
    no hint; the line names the profile's key and where its number comes from."""
    site = tmp_path / "mycluster.yaml"
    site.write_text(f"partition: gpu\ngpus_per_node: 2\n{kept}\n")
    code, err, root = run(tmp_path, "--site", str(site), "--model", "Qwen/Qwen2.5-0.5B",
                          "--vllm-mode", mode)
    assert_refused(code, err, root, fake_slurm, f"error: {missing}: site 'mycluster' does not "
                   f"set {missing}", f"add {missing}: to the profile", "hpc-grpo site init")


@pytest.mark.parametrize(("setting", "words"), [
    ("max_steps=abc", ("--set: max_steps", "expected int, got str 'abc'")),  # issue #13
    ("max_steps=0", ("max_steps", "positive number of steps, or -1")),
    ("learning_rate=0", ("learning_rate", "must be greater than 0")),
    ("num_generations=1", ("num_generations", "at least 2")),
    ("loss_type=drgrpo", ("loss_type", "not one of TRL's values", "did you mean 'dr_grpo'")),
    ("max_completion_length=null", ("max_completion_length", "must be a number")),
])
def test_bad_grpo_value(tmp_path: Path, fake_slurm: Path, setting: str, words: tuple[str, ...]) -> None:
    code, err, root = run(tmp_path, "--site", "sandbox", "--model", "builtin:tiny", "--set", setting)
    assert_refused(code, err, root, fake_slurm, *words)


def test_every_bad_grpo_value_is_listed_at_once(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: builtin:tiny\nper_device_train_batch_size: 0\nloss_type: drgrpo\n"
                      "max_steps: 5\n")
    code, err, root = run(tmp_path, "--site", "sandbox", "--recipe", str(recipe),
                          "--set", "max_steps=abc", "--set", "learning_rate=0",
                          "--set", "temperature=hot", "--set", "num_generation=4")
    assert code == 2, err
    lines = err.strip().splitlines()
    expected = ["recipe: per_device_train_batch_size: must be at least 1, got 0",
                "recipe: loss_type: 'drgrpo'", "--set: max_steps: expected int, got str 'abc'",
                "--set: learning_rate: must be greater than 0", "--set: temperature: expected float",
                "--set: unknown key 'num_generation'"]
    assert len(lines) == len(expected), err
    assert all(line.startswith("error: ") for line in lines)
    for words in expected:
        assert sum(words in line for line in lines) == 1, (words, err)
    assert fake_slurm.calls("sbatch") == []


@pytest.mark.parametrize(("time", "rendered"), [("1-12:30", "36:30:00"), ("2-0:30", "48:30:00"),
                                                ("1-12", "36:00:00"), ("90", "01:30:00")])
def test_days_hours_time_is_rendered_as_slurm_reads_it(tmp_path: Path, time: str,
                                                      rendered: str) -> None:
    """After ``D-`` Slurm reads hours[:minutes[:seconds]]: ``1-12:30`` is 36.5 hours, which the
    script's ``--time`` must say (it once said 24:13:00, minutes:seconds after the day)."""
    site = tmp_path / "week.yaml"
    site.write_text("partition: debug\ncpus_per_node: 4\ncpu_memory_gib: 8\nmax_time: 7-00:00:00\n")
    result = CliRunner().invoke(main, ["render", "--site", str(site), "--model", "builtin:tiny",
                                       "--output-root", str(tmp_path / "runs"), "--time", time])
    assert result.exit_code == 0, result.stderr
    assert f"#SBATCH --time={rendered}\n" in result.output


def test_trl_spelling_of_train_by_epochs_is_accepted(tmp_path: Path) -> None:
    """open-r1 recipes write max_steps: -1; render shows the script, nothing is created."""
    result = CliRunner().invoke(main, ["render", "--site", "sandbox", "--model", "builtin:tiny",
                                       "--output-root", str(tmp_path / "runs"),
                                       "--set", "max_steps=-1"])
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_export_hint_names_the_run_from_a_relative_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "grpo-old-0002" / "checkpoints" / "checkpoint-7"
    (folder / "global_step7").mkdir(parents=True)
    for name in ("latest", "config.json", "tokenizer.json", "training_args.bin"):
        (folder / name).write_text("{}")
    monkeypatch.chdir(folder)
    with pytest.raises(UserError) as caught:
        inputs.resolve_model(".", tmp_path / "home")
    assert f"hpc-grpo export {tmp_path / 'grpo-old-0002'} --step 7" in (caught.value.hint or "")


def test_a_builtin_model_whose_build_was_killed_is_built_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPC_GRPO_HOME", str(tmp_path / "home"))
    target = inputs.builtin_model_dir("builtin:tiny", tmp_path / "home")
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # save_pretrained writes it first
    built: list[str] = []
    monkeypatch.setattr(builtin_model, "write_example_model",
                        lambda shape, folder, python: built.append(shape) or folder)
    assert builtin_model.ensure_builtin_model("builtin:tiny", "python3") is True
    assert built == ["tiny"]
    (target / "model.safetensors").write_bytes(b"")
    assert builtin_model.ensure_builtin_model("builtin:tiny", "python3") is False
    assert built == ["tiny"]


def test_example_model_writes_only_into_a_new_or_empty_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #58: `example-model DIR` wrote over the files of the same names in a non-empty
    folder and left the rest: a folder of two models. A folder holding the example model
    already is left as it is (no build); any other non-empty one is refused, exit 2."""
    built: list[Path] = []

    def build(shape: str, folder: Path, python: str = "") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(
            '{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, '
            '"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}')
        (folder / "model.safetensors").write_bytes(b"")
        built.append(folder)
        return folder

    monkeypatch.setattr(builtin_model, "write_example_model", build)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = CliRunner().invoke(main, ["example-model", str(empty)])
    assert out.exit_code == 0 and out.stdout == f"wrote {empty}\n" and built == [empty]
    out = CliRunner().invoke(main, ["example-model", str(empty)])  # the same model: kept
    assert out.exit_code == 0 and "already holds the example model" in out.stdout
    assert built == [empty]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"hidden_size": 4096}')
    out = CliRunner().invoke(main, ["example-model", str(mine)])
    assert out.exit_code == 2 and built == [empty]
    assert f"{mine} is not empty and does not hold the example model builtin:tiny" in out.stderr
    assert (mine / "config.json").read_text() == '{"hidden_size": 4096}'


def test_a_recipe_not_in_utf8_is_one_line(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """A recipe saved in Latin-1 (an accented comment) was a UnicodeDecodeError traceback."""
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"model: builtin:tiny\n# r\xe9glage\n")
    code, err, root = run(tmp_path, "--site", "sandbox", "--recipe", str(recipe))
    assert_refused(code, err, root, fake_slurm, "recipe", "not UTF-8", "0xe9 on line 2",
                   "save it as UTF-8")


def test_a_site_profile_not_in_utf8_is_one_line(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"partition: debug\ndescription: \xff\xfe\n")
    code, err, root = run(tmp_path, "--site", str(bad), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, "site profile", "not UTF-8", "line 2")


def test_a_directory_as_the_site_is_one_line(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    """``--site /some/dir`` was an IsADirectoryError traceback (``--recipe`` one Click refuses)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    code, err, root = run(tmp_path, "--site", str(folder), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, "site profile", "is a directory", "hint")


def test_an_unreadable_recipe_or_profile_is_one_line(
        tmp_path: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission denied (chmod 000 does not stop root, so the read is made to fail)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: builtin:tiny\n")
    real = Path.open

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name in ("r.yaml", "p.yaml"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)  # strict._read_text opens it, to read a limit
    code, err, root = run(tmp_path, "--site", "sandbox", "--recipe", str(recipe))
    assert_refused(code, err, root, fake_slurm, "recipe", "cannot be read: Permission denied")
    code, err, root = run(tmp_path, "--site", str(tmp_path / "p.yaml"), "--model", "builtin:tiny")
    assert_refused(code, err, root, fake_slurm, "site profile", "cannot be read")


def test_a_recipe_directory_through_the_api_is_one_line(tmp_path: Path) -> None:
    """The api's Request gets the same line as the CLI's --recipe (strict._read_text)."""
    from hpc_grpo import api

    with pytest.raises(UserError, match="is a directory"):
        api.prepare(api.Request(site="sandbox", recipe=str(tmp_path)))


@pytest.mark.parametrize("as_json", [False, True])
def test_sites_lists_the_good_profiles_and_a_line_for_each_broken_one(
        tmp_path: Path, as_json: bool) -> None:
    """A broken profile in the folder (not UTF-8, a typo) exited 2 at the first one and listed
    none of the good ones (#58): now each broken one is a warning line on stderr (name, file,
    first problem), the good ones are listed as before, and the exit is 0."""
    import json

    sites = tmp_path / "sites"  # HPC_GRPO_SITES (tests/conftest.py)
    sites.mkdir()
    (sites / "latin.yaml").write_bytes(b"description: caf\xe9\n")
    (sites / "typo.yaml").write_text("partition: debug\naccount_name: x\n")
    (sites / "mine.yaml").write_text("scheduler: local\ndescription: my laptop\n")
    result = CliRunner().invoke(main, ["sites", *(["--json"] if as_json else [])])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"warning: site profile 'latin' ({sites / 'latin.yaml'}) does not load: site profile: "
        f"site profile {sites / 'latin.yaml'} is not UTF-8 text: byte 0xe9 on line 1 "
        "(hint: save it as UTF-8)",
        f"warning: site profile 'typo' ({sites / 'typo.yaml'}) does not load: typo.yaml: "
        "account_name: unknown key 'account_name' (hint: did you mean 'account'?)"]
    if as_json:
        names = [p["name"] for p in json.loads(result.stdout)]
    else:
        names = [line.split()[0] for line in result.stdout.splitlines()]
    assert "mine" in names and "local" in names and "sandbox" in names
    assert "latin" not in names and "typo" not in names


def test_sites_exits_2_when_no_profile_loads(tmp_path: Path) -> None:
    """Every shipped profile shadowed by a broken one of the user's: nothing to list."""
    from hpc_grpo.config.site import available_sites, builtin_sites_dir

    sites = tmp_path / "sites"
    sites.mkdir()
    shipped = available_sites([builtin_sites_dir()])
    for name in shipped:
        (sites / f"{name}.yaml").write_text("gpus_per_nodes: 4\n")
    result = CliRunner().invoke(main, ["sites"])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == len(shipped) and all("unknown key 'gpus_per_nodes'" in x for x in lines)


@pytest.mark.parametrize(("line", "words"), [
    ("1: 2", ("recipe: key 1 is not a setting name", "a number")),
    ("null: 2", ("recipe: key null is not a setting name", "null")),
    ("true: 2", ("recipe: key true is not a setting name", "a boolean")),
    ("grpo:\n  0.5: 2", ("recipe: key 0.5 is not a setting name",)),
])
def test_a_recipe_key_that_is_no_name_is_one_line(tmp_path: Path, fake_slurm: FakeSlurm,
                                                  line: str, words: tuple[str, ...]) -> None:
    """An unquoted 1:, null: or true: key was a TypeError in did_you_mean (it compares text)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: builtin:tiny\n{line}\n")
    code, err, root = run(tmp_path, "--site", "sandbox", "--recipe", str(recipe))
    assert_refused(code, err, root, fake_slurm, *words)


@pytest.mark.parametrize("under", ["", "sub/runs"])
def test_an_output_root_that_is_a_file_is_refused_before_planning(
        tmp_path: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch,
        under: str) -> None:
    """--output-root naming a file (or a path under one) was a FileExistsError
    (NotADirectoryError) traceback from create_run_dir, after the whole plan was made."""
    from hpc_grpo import api

    def no_planning(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("planned despite an impossible output root")

    monkeypatch.setattr(api, "check_inputs", no_planning)
    blocker = tmp_path / "afile"
    blocker.write_text("mine\n")
    root = blocker / under if under else blocker
    result = CliRunner().invoke(main, ["submit", "--site", "sandbox", "--model", "builtin:tiny",
                                       "--output-root", str(root)], catch_exceptions=False)
    words = ("--output-root", "is under the file" if under else "is a file", "not a directory")
    assert_refused(result.exit_code, result.stderr, tmp_path / "nothing", fake_slurm, *words)
    assert blocker.read_text() == "mine\n"


@pytest.mark.parametrize("content", [b"", b'{"run_id": "grpo-x-0001", ', b"[1, 2]\n",
                                     b'{"run_id": "caf\xe9"}\n'],
                         ids=["empty", "truncated", "a list", "not UTF-8"])
@pytest.mark.parametrize("command", [["export"], ["export", "--job"], ["eval"]])
def test_export_and_eval_read_a_broken_run_json_as_resume_does(
        tmp_path: Path, content: bytes, command: list[str]) -> None:
    """They parsed run.json themselves: JSONDecodeError, AttributeError ('list' has no get) and
    UnicodeDecodeError tracebacks where status shows the problem and resume refuses in one line
    (runfiles.read_run_record: the same reader, the same line)."""
    run_dir = tmp_path / "grpo-x-0001"
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes(content)
    result = CliRunner().invoke(main, [*command, str(run_dir)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    doing = "evaluated" if command == ["eval"] else "exported"
    assert lines[0].startswith(f"error: run: run grpo-x-0001 cannot be {doing}: run.json ")
    assert "`hpc-grpo status` shows what is wrong" in lines[0]
    resumed = CliRunner().invoke(main, ["resume", str(run_dir)], catch_exceptions=False)
    assert lines[0].split(": run.json ")[1] == resumed.stderr.strip().split(": run.json ")[1]


def test_eval_of_a_model_folder_in_a_run_with_a_broken_run_json_is_one_line(
        tmp_path: Path) -> None:
    """A folder of the run (an export) takes its defaults from the run's run.json."""
    run_dir = tmp_path / "grpo-x-0001"
    folder = run_dir / "export" / "step-4"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (run_dir / "run.json").write_text("[]")
    result = CliRunner().invoke(main, ["eval", str(folder)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "error: run: run grpo-x-0001 cannot be evaluated: run.json holds a list, not a JSON "
        "object (hint: `hpc-grpo status` shows what is wrong with it)"]
