"""api.submit with fake Slurm binaries: the exact script, the job's identity, atomic run dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from hpc_grpo.runs import registry, track
from tests.unit.slurmfake import FakeSlurm, squeue_line

T0 = "2026-01-01T10:00:00"
MODEL = "Qwen/Qwen2.5-0.5B"  # a catalogue model: nothing to build or download


@pytest.fixture
def fake(fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """The shared fake Slurm (tests/unit/conftest.py), with this module's answers."""
    fake.answer("sinfo", "node1\nnode2\nnode3\nnode4\n")
    return fake


def _request(root: Path, run_id: str | None = None) -> api.Request:
    return api.Request(site="sandbox", flags={"model": MODEL, "nodes": 2}, run_id=run_id,
                       output_root=str(root), python="/usr/bin/python3")


def test_submit_records_the_job_as_slurm_sees_it(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.answer("squeue", squeue_line("4242", "PENDING", T0, name="grpo-qwen2.5-0.5b",
                                      nodes=""))
    result = api.submit(_request(tmp_path / "runs"))
    run_dir = result.run_dir
    assert (result.job_id, run_dir.name) == ("4242", "grpo-qwen2.5-0.5b-0001")
    (sbatch,) = fake.calls("sbatch")
    assert sbatch["script"] == (run_dir / "job.sbatch").read_text()  # as rendered, untouched
    (line,) = [json.loads(x) for x in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert {k: line[k] for k in ("job_id", "event", "cluster", "submit_time", "job_name")} == {
        "job_id": "4242", "event": "submitted", "cluster": "sandbox", "submit_time": T0,
        "job_name": "grpo-qwen2.5-0.5b"}
    assert line["script"] == sbatch["argv"][-1]
    assert line["script"].startswith(f"{run_dir}/submitit/.submission_file_")
    assert [r.run_dir for r in registry.indexed_runs()] == [run_dir]

    fake.answer("squeue", squeue_line("4242", "RUNNING", T0, command=line["script"]))
    assert track.status()[0].state == "RUNNING"
    fake.answer("squeue", squeue_line("4242", "RUNNING", "2026-01-02T00:00:00", name="sleep"))
    row = track.status()[0]
    # same cluster, the id now another job's: this run's job is gone, it never trained
    assert (row.state, row.finished, row.source, row.phase) == ("ENDED", True, "run directory", "")
    assert "now another job ('sleep'" in row.note


def test_sbatch_refusing_leaves_no_run(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.answer("sbatch", err="sbatch: error: Batch job submission failed: Invalid account\n",
                rc=1)
    with pytest.raises(UserError, match="Invalid account"):
        api.submit(_request(tmp_path / "runs"))
    assert [p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")] == []
    assert registry.indexed_runs() == []
    assert fake.calls("squeue") == []


def test_the_same_run_id_in_two_output_roots(fake: FakeSlurm, tmp_path: Path) -> None:
    first = api.submit(_request(tmp_path / "a", run_id="same-0001"))
    second = api.submit(_request(tmp_path / "b", run_id="same-0001"))
    assert first.run_dir != second.run_dir
    assert {r.run_dir for r in track.status()} == {str(first.run_dir), str(second.run_dir)}
    result = CliRunner().invoke(main, ["status", "same-0001"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: run: 'same-0001' matches 2 runs")
    assert str(first.run_dir) in line and str(second.run_dir) in line
    one = CliRunner().invoke(main, ["status", "--json", str(second.run_dir)])
    assert one.exit_code == 0 and [r["run_dir"] for r in json.loads(one.stdout)] == [
        str(second.run_dir)]


def _refused_at_submit(fake: FakeSlurm, recipe: Path, root: Path) -> list[str]:
    """``submit`` of ``recipe`` on the two-node sandbox: refused (exit 2) before sbatch, with no
    traceback and nothing in the output root; the lines it said."""
    result = CliRunner().invoke(main, ["submit", "--site", "sandbox", "--nodes", "2", "--recipe",
                                       str(recipe), "--output-root", str(root), "--no-wait"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and fake.calls("sbatch") == []
    assert not root.exists() or [p for p in root.iterdir() if not p.name.startswith(".")] == []
    return [line for line in result.output.splitlines() if line.strip()]


def test_qlora_on_a_cpu_site_is_refused_before_anything_is_written(fake: FakeSlurm,
                                                                    tmp_path: Path) -> None:
    """An open-r1 style recipe asking for QLoRA on the (CPU) sandbox: bitsandbytes' 4-bit
    kernels need CUDA, so every rank would fail on its first line after the queue wait."""
    recipe = tmp_path / "qlora.yaml"
    recipe.write_text(f"model_name_or_path: {MODEL}\nuse_peft: true\nload_in_4bit: true\n"
                      "lora_r: 16\nlora_alpha: 32\nmax_steps: 4\n")
    said = _refused_at_submit(fake, recipe, tmp_path / "runs")
    assert len(said) == 1 and "load_in_4bit (QLoRA) needs CUDA GPUs" in said[0], said
    assert "drop load_in_4bit" in said[0]
    recipe.write_text(recipe.read_text().replace("load_in_4bit: true", "load_in_4bit: false"))
    again = CliRunner().invoke(main, ["plan", "--site", "sandbox", "--nodes", "2", "--recipe",
                                      str(recipe)])
    assert again.exit_code == 0, again.output  # plain LoRA is fine on CPU


def test_save_strategy_best_from_an_open_r1_style_recipe_is_refused_before_submit(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """A recipe written for a trainer that evaluates (save_strategy best with its metric, as HF
    fine-tuning recipes write it): hpc-grpo runs no evaluation, drops the eval keys with a note,
    and transformers' Trainer would then refuse 'best' without a metric on every rank after the
    queue wait. Refused here, in one line that names the way to the best checkpoint."""
    recipe = tmp_path / "best.yaml"
    recipe.write_text(f"model_name_or_path: {MODEL}\nmax_steps: 4\nsave_strategy: best\n"
                      "eval_strategy: steps\neval_steps: 2\nmetric_for_best_model: reward\n"
                      "load_best_model_at_end: true\n")
    said = _refused_at_submit(fake, recipe, tmp_path / "runs")
    refusals = [line for line in said if line.startswith("error:")]
    assert len(refusals) == 1 and "save_strategy: 'best'" in refusals[0], said
    assert "hpc-grpo export RUN --best reward_mean" in refusals[0]
    again = CliRunner().invoke(main, ["plan", "--site", "sandbox", "--nodes", "2", "--recipe",
                                      str(recipe), "--set", "save_strategy=steps"])
    assert again.exit_code == 0, again.output  # --set takes it back without editing the recipe


def test_resume_and_save_options_that_break_exact_resume_are_refused_before_submit(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Three transformers options a multi-node recipe may carry: save_on_each_node (a writer per
    node into the one shared run directory), ignore_data_skip (a requeued run would train the
    stopped epoch's first batches again) and save_only_model (checkpoints a requeued run cannot
    resume from: under DeepSpeed the resume fails on every rank). Each refused with its reason
    and the --set that takes it back; with those, the same recipe plans."""
    recipe = tmp_path / "multinode.yaml"
    recipe.write_text(f"model_name_or_path: {MODEL}\nmax_steps: 4\nsave_on_each_node: true\n"
                      "ignore_data_skip: true\nsave_only_model: true\n")
    said = _refused_at_submit(fake, recipe, tmp_path / "runs")
    text = "\n".join(said)
    assert "'save_on_each_node: True' is not supported" in text
    assert "a writer per node would collide" in text and "--set save_on_each_node=false" in text
    assert "'ignore_data_skip: True' is not supported" in text
    assert "first batches again" in text and "--set ignore_data_skip=false" in text
    assert "'save_only_model: True' is not supported" in text  # no state to resume from
    assert "cannot resume from a model-only one" in text and "hpc-grpo export" in text
    again = CliRunner().invoke(main, ["plan", "--site", "sandbox", "--nodes", "2", "--recipe",
                                      str(recipe), "--set", "save_on_each_node=false",
                                      "--set", "ignore_data_skip=false",
                                      "--set", "save_only_model=false"])
    assert again.exit_code == 0, again.output


def test_premise_transformers_skips_data_and_saves_per_node_as_the_refusals_say() -> None:
    """Why those two are refused (config/recipe_format.py ONLY_DEFAULT): transformers' resumed
    epoch skips its trained batches only without ignore_data_skip, save_on_each_node makes
    each node's first rank a writer, and save_only_model writes no optimizer state and no
    global_step folder, without which DeepSpeed's resume fails. If transformers changes any,
    revisit the refusals."""
    import inspect

    trainer = pytest.importorskip("transformers.trainer")
    from transformers import TrainingArguments

    epoch = inspect.getsource(trainer.Trainer._run_epoch)
    assert "steps_trained_in_current_epoch > 0 and not self.args.ignore_data_skip" in epoch
    # transformers 5.25 moved the skip into an overridable Trainer.get_resumed_dataloader (CI
    # installed it the day it came out); before, _run_epoch called accelerate's skip itself
    resumed = getattr(trainer.Trainer, "get_resumed_dataloader", None)
    if resumed is not None:
        assert "self.get_resumed_dataloader(train_dataloader, steps_trained_in_current_epoch)" \
            in epoch
        assert "skip_first_batches(dataloader, num_batches)" in inspect.getsource(resumed)
    else:
        assert "skip_first_batches" in epoch
    writer = inspect.getsource(TrainingArguments.should_save.fget)  # type: ignore[attr-defined]
    assert "if self.save_on_each_node:" in writer and "self.local_process_index == 0" in writer
    save = inspect.getsource(trainer.Trainer._save_checkpoint)
    assert "if not self.args.save_only_model:" in save and "_save_optimizer_and_scheduler" in save
    deepspeed = pytest.importorskip("transformers.integrations.deepspeed")
    resume = inspect.getsource(deepspeed.deepspeed_load_checkpoint)
    assert 'glob.glob(f"{checkpoint_path}/global_step*")' in resume
    assert "Can't find a valid checkpoint" in resume


def test_two_submits_of_one_job_at_once_each_get_a_run(fake: FakeSlurm, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Both submits look for the next number while planning, before either directory exists:
    the second to claim it takes the number after, with its script and run.json rendered for
    that directory. Before, it was refused ('already exists: choose another --run-id') though
    the user never gave one."""
    real = registry.create_run_dir
    raced: list[api.Submitted] = []
    claims: list[str] = []

    def other_submit_claims_first(root: Path, run_id: str, files: dict[str, str],
                                  mode: int = 0o700) -> object:
        claims.append(run_id)
        if len(claims) == 1:  # the other submit planned the same number and claims it now
            raced.append(api.submit(_request(tmp_path / "runs")))
        return real(root, run_id, files, mode=mode)

    monkeypatch.setattr(registry, "create_run_dir", other_submit_claims_first)
    ours = api.submit(_request(tmp_path / "runs"))
    (other,) = raced
    assert (other.run_dir.name, ours.run_dir.name) == ("grpo-qwen2.5-0.5b-0001",
                                                        "grpo-qwen2.5-0.5b-0002")
    for result in (other, ours):
        record = json.loads((result.run_dir / "run.json").read_text())
        assert (record["run_id"], record["run_dir"]) == (result.run_id, str(result.run_dir))
        script = (result.run_dir / "job.sbatch").read_text()
        assert str(result.run_dir) in script
    assert str(other.run_dir) not in (ours.run_dir / "job.sbatch").read_text()
    assert len(fake.calls("sbatch")) == 2
    assert claims == [ours.run_id.replace("0002", "0001"), other.run_id, ours.run_id]
    assert sorted(r.run_dir for r in registry.indexed_runs()) == [other.run_dir, ours.run_dir]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [other.run_id, ours.run_id]


def test_a_run_id_given_and_taken_meanwhile_is_refused_in_one_line(
        fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's own --run-id claimed by another submit between the check and the rename
    (os.rename onto a non-empty directory): refused as taken, not an OSError; nothing left."""
    real_rename = registry.os.rename

    def claimed_meanwhile(src: str, dst: str) -> None:
        Path(dst).mkdir()
        (Path(dst) / "run.json").write_text("{}")  # the other submit's
        real_rename(src, dst)

    monkeypatch.setattr(registry.os, "rename", claimed_meanwhile)
    with pytest.raises(registry.RunIdTaken, match="already exists") as caught:
        api.submit(_request(tmp_path / "runs", run_id="mine-0001"))
    assert "choose another --run-id" in caught.value.one_line()
    assert fake.calls("sbatch") == []
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["mine-0001"]  # the other's alone


def test_an_empty_site_file_submits_nothing(fake: FakeSlurm, tmp_path: Path) -> None:
    """#58: a zero-byte --site FILE ran as a default Slurm site; now one line, exit 2."""
    site = tmp_path / "cluster.yaml"
    site.write_text("")
    result = CliRunner().invoke(main, ["submit", "--site", str(site), "--model", MODEL,
                                       "--output-root", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()[:1]
    assert f"site profile {site} is empty" in line
    assert fake.calls("sbatch") == [] and not (tmp_path / "runs").exists()
