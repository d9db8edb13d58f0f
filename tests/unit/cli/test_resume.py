"""hpc-grpo resume with fake Slurm binaries: a new job in the same run directory, or a clear
refusal with nothing written and nothing submitted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from hpc_grpo.rundir import reshard
from hpc_grpo.runs import track
from tests.unit.slurmfake import FakeSlurm, squeue_line

T0 = "2026-01-01T10:00:00"
MODEL = "Qwen/Qwen2.5-0.5B"  # a catalogue model: nothing to build or download
LAUNCHER_FILES = ("run.json", "job.sbatch", "plan.txt", "spec.json", "jobs.jsonl")


@pytest.fixture
def fake(fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """The shared fake Slurm (tests/unit/conftest.py), with this module's answers."""
    fake.answer("sinfo", "node1\nnode2\nnode3\nnode4\n")
    return fake


def _submit(root: Path, *sets: str) -> Path:
    """A run on partition `high` (not the profile's `debug`), 2 nodes, as submit leaves it."""
    request = api.Request(site="sandbox", flags={"model": MODEL, "nodes": 2, "partition": "high"},
                          sets=("max_steps=40", "save_steps=10", *sets),
                          output_root=str(root), python="/usr/bin/python3")
    return api.submit(request).run_dir


def _trained(run_dir: Path, *, phase: str, step: int, complete: tuple[int, ...],
             torn: tuple[int, ...] = ()) -> None:
    """What the ranks leave: state.json, metrics, complete checkpoints and torn ones."""
    (run_dir / "state.json").write_text(json.dumps({"phase": phase, "step": step,
                                                    "max_steps": 40}))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward_mean": -s}) + "\n" for s in range(1, step + 1)))
    for number in (*complete, *torn):
        folder = run_dir / "checkpoints" / f"checkpoint-{number}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": number}))
        if number in complete:
            (folder / "hpc_grpo_complete.json").write_text(json.dumps({"step": number}))


def _snapshot(run_dir: Path) -> dict[str, str]:
    return {n: (run_dir / n).read_text() for n in LAUNCHER_FILES}


def _jobs(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run_dir / "jobs.jsonl").read_text().splitlines()]


def test_resume_submits_a_new_job_in_the_same_run_directory(fake: FakeSlurm,
                                                             tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    old = _snapshot(run_dir)
    _trained(run_dir, phase="interrupted", step=23, complete=(10, 20), torn=(30,))
    fake.answer("squeue", "")  # job 4242 is gone (scancel'd, retries spent...)
    fake.answer("sbatch", "Submitted batch job 4243\n")

    result = api.resume(str(run_dir), sets=("max_steps=60", "save_steps=5"), time="00:20:00")

    assert (result.job_id, result.previous_job_id, result.from_step) == ("4243", "4242", 20)
    assert not result.follow  # a Slurm job: resume returns, as submit does
    assert result.run_dir == run_dir and result.run_id == run_dir.name
    sbatch = fake.calls("sbatch")[-1]
    script = (run_dir / "job.sbatch").read_text()
    assert sbatch["script"] == script  # what was rendered is what sbatch got
    assert "#SBATCH --time=00:20:00" in script and "#SBATCH --partition=high" in script
    assert "#SBATCH --nodes=2" in script
    record = json.loads((run_dir / "run.json").read_text())
    assert record["grpo_config"]["max_steps"] == 60 and record["grpo_config"]["save_steps"] == 5
    assert record["time_min"] == 20 and record["run_dir"] == str(run_dir)
    # the replaced job's files are kept, byte for byte
    kept = run_dir / "attempts" / "01-job-4242"
    assert {n: (kept / n).read_text() for n in ("run.json", "job.sbatch", "plan.txt",
                                                "spec.json")} == \
        {n: old[n] for n in ("run.json", "job.sbatch", "plan.txt", "spec.json")}
    first, second = _jobs(run_dir)
    assert first["job_id"] == "4242" and second["job_id"] == "4243"
    assert (second["event"], second["resumed_from_job"], second["resumed_from_step"]) == \
        ("submitted", "4242", 20)
    assert str(second["script"]).startswith(f"{run_dir}/submitit/.submission_file_")
    assert second["script"] != first["script"]
    assert not list(run_dir.parent.glob(".*"))  # no temporary file left beside or in the run
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]

    fake.answer("squeue", squeue_line("4243", "PENDING", T0, command=str(second["script"]),
                                      name="grpo-qwen2.5-0.5b"))
    (row,) = track.status()
    assert (row.job_id, row.state) == ("4243", "PENDING")  # the run's job is now the new one

    # a second resume keeps the first one's records too
    fake.answer("squeue", "")
    fake.answer("sbatch", "Submitted batch job 4250\n")
    again = api.resume(run_dir.name)
    assert (again.previous_job_id, again.job_id) == ("4243", "4250")
    assert sorted(p.name for p in (run_dir / "attempts").iterdir()) == ["01-job-4242",
                                                                       "02-job-4243"]
    assert json.loads((run_dir / "run.json").read_text())["grpo_config"]["max_steps"] == 60


def test_a_live_job_is_never_doubled(fake: FakeSlurm, tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="training", step=12, complete=(10,))
    script = str(_jobs(run_dir)[0]["script"])
    before = _snapshot(run_dir)
    for state in ("RUNNING", "PENDING", "COMPLETING"):
        fake.answer("squeue", squeue_line("4242", state, T0, command=script))
        with pytest.raises(UserError, match=f"still {state} as job 4242"):
            api.resume(str(run_dir))
    fake.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(UserError, match="cannot check that job 4242"):
        api.resume(str(run_dir))
    assert _snapshot(run_dir) == before and not (run_dir / "attempts").exists()
    assert len(fake.calls("sbatch")) == 1  # the original submission only
    # the id now another user's job: ours is over, resume goes ahead
    fake.answer("squeue", squeue_line("4242", "RUNNING", "2026-02-01T00:00:00", name="sleep",
                                      command="/home/other/job.sh"))
    assert api.resume(str(run_dir)).from_step == 10


def test_what_a_checkpoint_cannot_follow_is_refused_with_the_reason(fake: FakeSlurm,
                                                                     tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="interrupted", step=12, complete=(10,))
    fake.answer("squeue", "")
    before = _snapshot(run_dir)
    with pytest.raises(UserError) as caught:
        api.resume(str(run_dir), sets=("nodes=4", "model=Qwen/Qwen2.5-1.5B", "seed=7",
                                       "per_device_train_batch_size=16", "dataset=builtin:digits"))
    text = caught.value.message
    assert "cannot change model from" in text and "holds this model's weights" in text
    assert "cannot change the layout" not in text  # 4 x 2 splits the global batch (below)
    assert "cannot change seed from 42 to 7" in text
    # the user's value against the split the new layout keeps the global batch 32 with
    assert "cannot change per_device_train_batch_size from 4 to 16" in text
    assert "dataset" not in text  # the same dataset named again is no change
    with pytest.raises(UserError) as caught:  # submit's GRPOConfig checks
        api.resume(str(run_dir), sets=("max_steps=abc",))
    assert "max_steps" in caught.value.one_line() and "'abc'" in caught.value.one_line()
    with pytest.raises(UserError, match="exceeds the site's maximum"):
        api.resume(str(run_dir), time="03:00:00")
    for zero in ("0", "0:0"):  # no limit to Slurm: once stored in spec.json and submitted
        with pytest.raises(UserError, match="zero, which Slurm takes as no limit"):
            api.resume(str(run_dir), time=zero)
    with pytest.raises(UserError, match="set by hpc-grpo"):
        api.resume(str(run_dir), sets=("deepspeed=ds.json",))
    assert _snapshot(run_dir) == before and not (run_dir / "attempts").exists()
    assert len(fake.calls("sbatch")) == 1


def test_a_finished_run_needs_a_larger_max_steps(fake: FakeSlurm, tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="done", step=40, complete=(40,))
    fake.answer("squeue", "")
    with pytest.raises(UserError, match="finished at step 40: max_steps 40 leaves") as caught:
        api.resume(str(run_dir))
    assert "--set max_steps=N with N > 40" in caught.value.hint
    with pytest.raises(UserError, match="finished at step 40: max_steps 30 leaves"):
        api.resume(str(run_dir), sets=("max_steps=30",))
    (run_dir / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 41}))
    with pytest.raises(UserError, match="max_steps 35 is not past the checkpoint at step 40"):
        api.resume(str(run_dir), sets=("max_steps=35",))
    fake.answer("sbatch", "Submitted batch job 5000\n")
    result = api.resume(str(run_dir), sets=("max_steps=80",))
    assert (result.job_id, result.from_step) == ("5000", 40)


def test_without_a_checkpoint_it_starts_again_from_step_0(fake: FakeSlurm,
                                                          tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="interrupted", step=7, complete=(), torn=(5,))
    fake.answer("squeue", "")
    fake.answer("sbatch", "Submitted batch job 4300\n")
    out = CliRunner().invoke(main, ["resume", str(run_dir)])
    assert out.exit_code == 0, out.output
    assert "job 4300" in out.output and "from step 0 (no complete checkpoint)" in out.output


def test_sbatch_refusing_the_resume_leaves_the_run_as_it_was(fake: FakeSlurm,
                                                             tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="interrupted", step=12, complete=(10,))
    before = _snapshot(run_dir)
    fake.answer("squeue", "")
    fake.answer("sbatch", err="sbatch: error: Batch job submission failed: Invalid qos\n", rc=1)
    out = CliRunner().invoke(main, ["resume", run_dir.name, "--set", "max_steps=50"])
    assert out.exit_code == 2 and "sbatch rejected the job" in out.output
    assert "Traceback" not in out.output
    assert _snapshot(run_dir) == before and not (run_dir / "attempts").exists()


def test_a_run_from_before_spec_json_is_refused(fake: FakeSlurm, tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs")
    (run_dir / "spec.json").unlink()
    fake.answer("squeue", "")
    out = CliRunner().invoke(main, ["resume", str(run_dir)])
    assert out.exit_code == 2
    assert "has no spec.json (submitted by an older hpc-grpo)" in out.output
    assert len(out.output.strip().splitlines()) == 1


GPU_SITE = """scheduler: slurm
partition: gpu
gpus_per_node: 4
gpu_type: h200
gpu_memory_gib: 141
cpu_memory_gib: 1800
max_time: "2-00:00:00"
"""


def test_a_link_measured_after_submit_does_not_move_the_resumed_layout(
        fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan picks the fastest layout from the link figures; doctor may measure them after a
    run started. Without the saved layout pinned, this 14B run planned TP 1 / ZeRO-3 on the
    assumed links and TP 2 / ZeRO-2 on a measured 10 GB/s inside the node (1 GB/s in the
    original report), and resume refused its own run ("cannot change
    vllm.tensor_parallel_size from 1 to 2")."""
    from hpc_grpo.preflight import inputs, links

    monkeypatch.setattr(inputs, "free_space", lambda root: (2**50, "a large scratch"))
    profile = tmp_path / "h200x4.yaml"
    profile.write_text(GPU_SITE)
    sets = ("max_prompt_length=256", "max_completion_length=512", "per_device_train_batch_size=8",
            "num_generations=8", "max_steps=40", "save_steps=10")
    request = api.Request(site=str(profile), flags={"model": "Qwen/Qwen2.5-14B"}, sets=sets,
                          output_root=str(tmp_path / "runs"), python="/usr/bin/python3")
    fake.answer("sbatch", "Submitted batch job 4242\n")
    run_dir = api.submit(request).run_dir
    before = json.loads((run_dir / "run.json").read_text())
    links.write_measurement("h200x4", {
        "kind": "links", "backend": "nccl", "nodes": 1, "procs_per_node": 4, "inter": None,
        "intra": {"gbs": 10.0, "mib": 256}, "measured_at": "2026-11-27T00:00:00+00:00"})
    moved = api.prepare(request).plan
    assert (moved.tensor_parallel_size, moved.deepspeed and moved.deepspeed.zero_stage) != (
        before["vllm"]["tensor_parallel_size"], before["deepspeed"]["zero_stage"])  # a new run moves
    _trained(run_dir, phase="interrupted", step=23, complete=(10, 20))
    fake.answer("squeue", "")
    fake.answer("sbatch", "Submitted batch job 4243\n")

    result = api.resume(str(run_dir))

    after = json.loads((run_dir / "run.json").read_text())
    assert result.job_id == "4243"
    assert after["vllm"]["tensor_parallel_size"] == before["vllm"]["tensor_parallel_size"]
    assert after["deepspeed"] == before["deepspeed"]
    submitted = len(fake.calls("sbatch"))
    with pytest.raises(UserError):  # the user's own ZeRO stage on a resume is theirs: refused
        api.resume(str(run_dir), sets=("zero_stage=2",) if before["deepspeed"]["zero_stage"] != 2
                   else ("zero_stage=3",))
    assert len(fake.calls("sbatch")) == submitted


def test_a_resume_at_another_world_size_keeps_the_global_batch_and_says_so(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """2 x 2 ranks x 8 per device (TRL's default) = 32 completions a step: at 4 x 2 the plan is
    4 per device; at 3 x 2 nothing splits 32 over 6 ranks, refused in one line before anything
    is written; a refusal's numbers come from the run's record."""
    run_dir = _submit(tmp_path / "runs")
    _trained(run_dir, phase="interrupted", step=12, complete=(10,))
    fake.answer("squeue", "")
    before = _snapshot(run_dir)
    with pytest.raises(UserError) as caught:
        api.resume(str(run_dir), nodes=3)
    assert caught.value.message.startswith(
        "cannot change the layout from 2 node(s) x 2 process(es) to 3 x 2: the global batch 32 "
        "(per-device 8 x accumulation 1 x 4 ranks) does not split over 6 ranks")
    assert _snapshot(run_dir) == before and len(fake.calls("sbatch")) == 1
    fake.answer("sbatch", "Submitted batch job 4243\n")
    result = api.resume(str(run_dir), nodes=4)
    line = "resumed at 4 x 2 from 2 x 2, global batch 32 kept: per-device 4 x accumulation 1"
    assert result.layout_change == line and result.from_step == 10
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["nodes"], record["procs_per_node"], record["world_size"]) == (4, 2, 8)
    assert record["grpo_config"]["per_device_train_batch_size"] == 4
    assert record["grpo_config"]["gradient_accumulation_steps"] == 1
    assert "#SBATCH --nodes=4" in (run_dir / "job.sbatch").read_text()
    assert (run_dir / "plan.txt").read_text().endswith(line + "\n")
    assert _jobs(run_dir)[-1]["layout_change"] == line
    spec = json.loads((run_dir / "spec.json").read_text())["spec"]
    assert spec["nodes"] == 4 and spec["grpo"]["per_device_train_batch_size"] == 4
    fake.answer("squeue", "")
    (row,) = track.status()
    assert row.layout_change == line  # status prints it under the table (views._notes)
    # back to 2 x 2: the per-device batch never grows past the one the last plan sized (4)
    fake.answer("sbatch", "Submitted batch job 4244\n")
    back = api.resume(str(run_dir), nodes=2)
    assert back.layout_change == ("resumed at 2 x 2 from 4 x 2, global batch 32 kept: "
                                  "per-device 4 x accumulation 2")


def test_a_checkpoint_inside_a_generation_block_is_not_resized(
        fake: FakeSlurm, tmp_path: Path) -> None:
    run_dir = _submit(tmp_path / "runs", "steps_per_generation=2")
    _trained(run_dir, phase="interrupted", step=12, complete=(10,))
    (run_dir / "checkpoints" / "checkpoint-10" / "generation-buffer").mkdir()
    fake.answer("squeue", "")
    with pytest.raises(UserError, match="at checkpoint-10: it was saved inside a generation "
                                        "block, its buffered completions are split over 4"):
        api.resume(str(run_dir), nodes=4)
    assert len(fake.calls("sbatch")) == 1  # the submission only


def test_a_zero_run_is_resized_and_the_conversion_recorded(fake: FakeSlurm,
                                                           tmp_path: Path) -> None:
    """2 x 2 ranks under ZeRO-2 resumed at 1 x 2: the global batch kept, and the plan says its
    job converts the shards (the ranks do: runtime/rank/checkpoints/universal.py)."""
    zero = _submit(tmp_path / "zero-runs", "zero_stage=2")
    _trained(zero, phase="interrupted", step=12, complete=(10,))
    fake.answer("squeue", "")
    fake.answer("sbatch", "Submitted batch job 4243\n")
    result = api.resume(str(zero), nodes=1)
    line = ("resumed at 1 x 2 from 2 x 2, global batch 32 kept: per-device 8 x accumulation 2; "
            "ZeRO-2 shards converted from 4 to 2 ranks")
    assert result.layout_change == line and result.from_step == 10
    record = json.loads((zero / "run.json").read_text())
    assert (record["world_size"], record["deepspeed"]["zero_stage"]) == (2, 2)
    assert record["grpo_config"]["gradient_accumulation_steps"] == 2
    assert (zero / "plan.txt").read_text().endswith(line + "\n")
    assert _jobs(zero)[-1]["layout_change"] == line
    # the conversion runs in the job's start-up, the other ranks waiting in a collective: both
    # bounds gain its time (a review found a 7B-sized conversion ended at the 10-minute floor)
    before = json.loads(next((zero / "attempts").iterdir()).joinpath("run.json").read_text())
    took = reshard.CONVERSION_MARGIN_S + math.ceil(
        2 * record["checkpoint_bytes"] / reshard.CONVERSION_BYTES_PER_S)
    assert record["watchdog"]["startup_s"] == before["watchdog"]["startup_s"] + took
    assert record["collective_timeout_s"] >= took > reshard.CONVERSION_MARGIN_S


@pytest.mark.parametrize(("local", "flag", "follows"), [
    (True, None, True), (True, "--no-wait", False), (False, None, False), (False, "--wait", True)])
def test_resume_follows_a_local_run_as_submit_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   local: bool, flag: str | None,
                                                   follows: bool) -> None:
    """#58: `submit --site local` followed the run, `resume` of it returned at once; both now
    take the back end's default, and the same --wait/--no-wait."""
    from hpc_grpo.runs import views

    followed: list[Path] = []
    monkeypatch.setattr(api, "resume", lambda run, **kw: api.Resumed(
        "r-0001", tmp_path, "123", "122", 4, (), "", local))
    monkeypatch.setattr(views, "follow", lambda run_dir, progress: followed.append(run_dir) or 0)
    result = CliRunner().invoke(main, ["resume", "r-0001", *([flag] if flag else [])])
    assert result.exit_code == 0, result.output
    assert followed == ([tmp_path] if follows else [])
