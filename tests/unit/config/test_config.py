from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hpc_grpo.config.site import available_sites, builtin_sites_dir, load_site, minutes
from hpc_grpo.config.spec import JobSpec, build_spec, grpo_fields, parse_set
from hpc_grpo.errors import UserError
from tests.paths import PACKAGE, REPO


def test_every_shipped_profile_loads() -> None:
    sites = available_sites([builtin_sites_dir()])
    assert {"local", "sandbox", "h100-pyxis", "lmod-apptainer"} <= set(sites)
    for path in sites.values():
        profile = load_site(str(path), [])
        assert profile.name == path.stem


def test_unknown_profile_key_suggests(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("partiton: gpu\n")
    with pytest.raises(UserError) as info:
        load_site(str(path), [])
    assert "unknown key 'partiton'" in info.value.message
    assert "partition" in info.value.hint
    assert info.value.field.startswith("c.yaml")


def test_unknown_site_name_suggests() -> None:
    with pytest.raises(UserError) as info:
        load_site("sandbx", [builtin_sites_dir()])
    assert "sandbox" in info.value.hint


def test_profile_type_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("gpus_per_node: eight\n")
    with pytest.raises(UserError, match="expected int"):
        load_site(str(path), [])
    path.write_text("container: {runtime: docker, image: x}\n")
    with pytest.raises(UserError, match="not one of"):
        load_site(str(path), [])
    path.write_text("port_range: [80, 90]\n")
    with pytest.raises(UserError, match="port_range"):
        load_site(str(path), [])


@pytest.mark.parametrize(("line", "words"), [
    ("cpus_per_node: 0", "cpus_per_node must be a positive integer, got 0"),
    ("cpus_per_node: -4", "cpus_per_node must be a positive integer, got -4"),
    ("gpus_per_node: -2", "gpus_per_node must be 0 or a positive integer, got -2"),
    ("procs_per_node: -2", "procs_per_node must be 0 or a positive integer, got -2"),
    ("max_nodes: -3", "max_nodes must be 0 or a positive integer, got -3"),
    ("max_requeues: -1", "max_requeues must be 0 or a positive integer, got -1"),
    ("signal_lead_s: -5", "signal_lead_s must be from 1 to 65535, got -5"),
    ("signal_lead_s: 0", "signal_lead_s must be from 1 to 65535, got 0"),
    ("signal_lead_s: 65536", "signal_lead_s must be from 1 to 65535, got 65536"),
    ("gpu_memory_gib: -1", "gpu_memory_gib must be 0 (not declared) or a positive number"),
    ("cpu_memory_gib: -8", "cpu_memory_gib must be 0 (not declared) or a positive number"),
    ("cpu_memory_gib: .nan", "cpu_memory_gib must be"),
    ("gpu_memory_gib: .inf", "gpu_memory_gib must be"),
])
def test_profile_numbers_are_checked_at_load(tmp_path: Path, line: str, words: str) -> None:
    """Counts and sizes go into #SBATCH lines and the plan as written: a negative one rendered
    --cpus-per-task=-4 or --signal=USR2@-5, or failed later naming no profile key."""
    path = tmp_path / "mycluster.yaml"
    path.write_text(f"partition: gpu\n{line}\n")
    with pytest.raises(UserError) as info:
        load_site(str(path), [])
    assert words in info.value.message and info.value.hint
    assert info.value.field == f"mycluster.yaml: {line.split(':')[0]}"


@pytest.mark.parametrize(("value", "hint"), [
    ("", "write '' for an empty string"), ("null", "write '' for an empty string"),
    ("[1, 2]", "quote it"), ("{b: 1}", "quote it"),
    ("3.10", "quote it: YAML read it as float 3.1"), ("2024-01-01", "quote it")])
def test_profile_env_values_must_be_scalars(tmp_path: Path, value: str, hint: str) -> None:
    """An empty value (YAML's null) was exported as PATH=None, a list or mapping as its repr."""
    path = tmp_path / "mycluster.yaml"
    path.write_text(f"env:\n  OMP_NUM_THREADS: 1\n  PATH: {value}\n")
    with pytest.raises(UserError, match="expected text, an integer or true/false") as info:
        load_site(str(path), [])
    assert info.value.field == "mycluster.yaml: env.PATH" and hint in info.value.hint


def test_profile_env_scalars_are_text(tmp_path: Path) -> None:
    path = tmp_path / "mycluster.yaml"
    path.write_text("env: {A: x, B: 1, C: '0.5', D: true, E: '', F: off}\n")
    assert load_site(str(path), []).env == {"A": "x", "B": "1", "C": "0.5", "D": "true", "E": "",
                                           "F": "false"}  # YAML's booleans, not Python's True


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30", 30),  # minutes
     ("45:00", 45), ("0:30", 1),  # minutes:seconds, seconds rounded up
     ("01:00:00", 60), ("00:10:30", 11),  # hours:minutes:seconds
     ("1-12", 2160),  # days-hours
     ("1-12:30", 2190), ("2-0:30", 2910),  # days-hours:minutes (not minutes:seconds)
     ("2-00:00:00", 2880), ("1-12:30:05", 2191)],  # days-hours:minutes:seconds
)
def test_slurm_time(text: str, expected: int) -> None:
    assert minutes(text, "time") == expected


@pytest.mark.parametrize("text", ["one hour", "", "1:2:3:4", "1-2:3:4:5", "-5", "1-2-3", "1-",
                                  "-1:00", "1.5", "1:", "٣"])
def test_bad_time(text: str) -> None:
    with pytest.raises(UserError, match="not a Slurm time") as info:
        minutes(text, "time")
    assert "days-hours:minutes" in info.value.hint


@pytest.mark.parametrize("text", ["0", "00", "0:0", "00:00:00", "0-0", "0-00:00", "0-0:0:0"])
def test_a_zero_time_limit_is_refused(text: str, tmp_path: Path) -> None:
    """Slurm reads a zero limit as none at all: the job would run past the site's max_time."""
    with pytest.raises(UserError, match="zero, which Slurm takes as no limit") as info:
        minutes(text, "time")
    assert info.value.field == "time" and "04:00:00" in info.value.hint
    path = tmp_path / "c.yaml"
    path.write_text(f"max_time: '{text}'\n")
    with pytest.raises(UserError, match="zero") as info:
        load_site(str(path), [])
    assert info.value.field == "c.yaml: max_time"


def test_an_unquoted_time_is_read_as_written_not_as_a_base_60_number(tmp_path: Path) -> None:
    """YAML 1.1 reads ``1:30:00`` as the int 5400 (base 60), which Slurm's "minutes" form
    would make 5400 minutes (90 hours); the profile means 90 minutes."""
    path = tmp_path / "c.yaml"
    path.write_text("max_time: 1:30:00\n")
    assert minutes(load_site(str(path), []).max_time, "max_time") == 90
    path.write_text("max_time: 5400\n")  # a bare number is still minutes, as Slurm reads it
    assert minutes(str(load_site(str(path), []).max_time), "max_time") == 5400  # minutes
    assert parse_set(["time=2:00:00"])["time"] == "2:00:00"


def test_a_set_replaces_a_key_of_the_nested_grpo_block_too() -> None:
    """spec.json keeps GRPOConfig keys under grpo:, as a recipe may: a run saved with a value
    refused since (save_only_model: true) is resumed with the --set the refusal names."""
    recipe = {"model": "a", "grpo": {"save_only_model": True, "max_steps": 3}}
    with pytest.raises(UserError, match="save_only_model"):
        build_spec(recipe, {}, {})
    spec = build_spec(recipe, parse_set(["save_only_model=false"]), {})
    assert spec.grpo == {"max_steps": 3}


def test_precedence_flags_over_set_over_recipe() -> None:
    recipe = {"model": "a", "nodes": 2, "learning_rate": 0.1, "max_steps": 5}
    sets = parse_set(["nodes=3", "learning_rate=0.2"])
    spec = build_spec(recipe, sets, {"nodes": 4, "seed": None})
    assert spec.nodes == 4
    assert spec.grpo == {"learning_rate": 0.2, "max_steps": 5}
    assert spec.seed == JobSpec(model="x").seed


def test_grpo_fields_pass_through_and_typos_fail() -> None:
    assert "num_generations" in grpo_fields()
    spec = build_spec({"model": "m", "beta": 0.04, "loss_type": "dapo"}, {}, {})
    assert spec.grpo == {"beta": 0.04, "loss_type": "dapo"}
    with pytest.raises(UserError) as info:
        build_spec({"model": "m", "num_generation": 4}, {}, {})
    assert "num_generations" in info.value.hint


def test_plan_owned_fields_are_refused_and_output_dir_is_ignored_with_a_note() -> None:
    with pytest.raises(UserError, match="set by hpc-grpo"):
        build_spec({"model": "m", "deepspeed": "ds.json"}, {}, {})
    spec = build_spec({"model": "m", "output_dir": "/tmp/x"}, {}, {})
    assert "output_dir" not in spec.grpo
    assert any("output_dir ignored" in note for note in spec.notes)
    assert "notes" not in spec.to_dict()  # a warning, not a setting: spec.json stays plain


def test_trl_alias_maps_to_spec_field() -> None:
    spec = build_spec({"model": "m", "vllm_tensor_parallel_size": 2}, {}, {})
    assert spec.tensor_parallel_size == 2


def test_missing_model() -> None:
    with pytest.raises(UserError, match="no model"):
        build_spec({}, {}, {})


def test_parse_set_values() -> None:
    assert parse_set(["a=1", "b=0.5", "c=true", "d=[x, y]", "e=text"]) == {
        "a": 1, "b": 0.5, "c": True, "d": ["x", "y"], "e": "text"}
    with pytest.raises(UserError, match="key=value"):
        parse_set(["novalue"])


def _field_script() -> ModuleType:
    path = REPO / "scripts" / "update_grpo_fields.py"
    spec = importlib.util.spec_from_file_location("update_grpo_fields", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_grpo_fields_match_installed_trl() -> None:
    """The login node checks names, kinds and allowed values against a shipped list; it must
    be what the script writes from the runtime's TRL, byte for byte."""
    import dataclasses

    trl = pytest.importorskip("trl")
    from trl import GRPOConfig

    assert trl.__version__.startswith("1.16")
    assert grpo_fields() == {f.name for f in dataclasses.fields(GRPOConfig)}, (
        "run: python scripts/update_grpo_fields.py")
    shipped = (PACKAGE / "grpo_fields.txt").read_text()
    assert shipped == _field_script().render(), "run: python scripts/update_grpo_fields.py"


def test_choices_from_help_text_are_still_in_it() -> None:
    """Allowed values TRL states only in prose are kept by hand: each must still be there."""
    import dataclasses

    pytest.importorskip("trl")
    from trl import GRPOConfig

    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(GRPOConfig)}
    for name, values in _field_script().HELP_CHOICES.items():
        for value in values:
            assert value in helps[name], f"{name}: TRL's help no longer names {value!r}"


def test_scientific_notation_is_a_float(tmp_path: Path) -> None:
    """YAML 1.1 reads ``1e-5`` as a string; TRL then fails deep inside the optimizer."""
    assert parse_set(["learning_rate=1e-05", "x=3E2"]) == {"learning_rate": 1e-05, "x": 300.0}
    recipe = tmp_path / "r.yaml"
    recipe.write_text("learning_rate: 1e-6\nname: 1e5x\n")
    from hpc_grpo.config.strict import read_yaml

    assert read_yaml(recipe, "recipe") == {"learning_rate": 1e-6, "name": "1e5x"}


@pytest.mark.parametrize("text", ["", "# my cluster, to be written\n\n# partition: gpu\n", "---\n"])
def test_an_empty_site_file_is_refused_not_the_default_site(tmp_path: Path, text: str) -> None:
    """#58: a zero-byte or comment-only --site FILE loaded as a default Slurm site."""
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=f"site profile {path} is empty") as info:
        load_site(str(path), [])
    assert "hpc-grpo site init mine" in info.value.hint
