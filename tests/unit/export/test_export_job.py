"""`hpc-grpo export` as a one-node job of the run's back end (export/side_job.py), with the shared
fake Slurm binaries: sbatch's argv (one node, the plan's memory, the run's partition), the
script (the same command, --here, the step pinned), export-jobs.jsonl, and `status` following
the job from squeue/sacct to the export it recorded. The local back end's end-to-end run is
tests/slow/test_export_job_local.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hpc_grpo.export import commands, plan
from hpc_grpo.export import side_job as job
from hpc_grpo.rundir import append_jsonl
from hpc_grpo.runs.after_training import export_job_line
from tests.paths import SITE_CONFIGS
from tests.unit.export import fakes
from tests.unit.slurmfake import FakeSlurm, sacct_line, squeue_line


def _run(tmp_path: Path, scheduler: str = "slurm") -> Path:
    run = fakes.run_dir(tmp_path, scheduler=scheduler, site="sandbox")
    (run / "spec.json").write_text(json.dumps({"site": "sandbox", "python": "/opt/py/bin/python",
                                               "spec": {"partition": "big"}}))
    fakes.checkpoint(run, 2)
    fakes.checkpoint(run, 4)
    return run


def test_export_job_goes_through_sbatch_with_the_plans_memory(tmp_path: Path,
                                                              fake: FakeSlurm) -> None:
    run = _run(tmp_path)
    lines: list[str] = []
    done = commands.export(str(run), job=True, best="reward_mean", push="my-org/x",
                           announce=lines.append)
    assert done.job is not None and done.job.job_id == "4242" and done.job.reason == "--job"
    assert lines[0].startswith("best reward_mean: step 4") and lines[1].startswith("export tiny-0001")
    (call,) = fake.calls("sbatch")
    script = run / "export-job-1.sh"
    assert call["argv"] == ["--parsable", "--nodes=1", "--ntasks=1", "--job-name=export-tiny-0001",
                            f"--output={run / 'logs' / 'export-job-1.log'}", "--mem=1537M",
                            "--time=120", "--partition=big", str(script)]
    text = script.read_text()
    assert ("\n/opt/py/bin/python -m hpc_grpo.cli export " + str(run) +
            " --here --step 4 --merge-lora\n") in text  # sandbox: nodes_online unsaid
    assert lines[2] == ("the site's nodes do not reach the hub: once the job is done, push from "
                        "here with `hpc-grpo export tiny-0001 --push my-org/x`")
    assert not (run / "export").exists()  # nothing written here: the job writes it
    entry = json.loads((run / "export-jobs.jsonl").read_text())
    assert entry["job_id"] == "4242" and entry["step"] == 4 and entry["scheduler"] == "slurm"


def test_status_follows_the_job_to_its_export(tmp_path: Path, fake: FakeSlurm) -> None:
    run = _run(tmp_path)
    commands.export(str(run), job=True)
    fake.answer("squeue", squeue_line("4242", "RUNNING", "2026-01-01T00:00:00",
                                      name="export-tiny-0001"))
    assert export_job_line(run) == "export job 4242 (step 4): RUNNING"
    fake.answer("squeue", "")
    fake.answer("sacct", sacct_line("4242", "FAILED", "2026-01-01T00:00:00", code="1:0"))
    assert export_job_line(run) == ("export job 4242 (step 4): FAILED, no export recorded: see "
                                    f"{run / 'logs' / 'export-job-1.log'}")
    target = run / "export" / "step-4"
    target.mkdir(parents=True)
    append_jsonl(run / "exports.jsonl", {"time": time.time() + 1, "step": 4, "path": str(target)})
    assert export_job_line(run) == f"export job 4242 (step 4): done, {target}"


def test_a_small_login_node_sends_the_export_to_a_job(tmp_path: Path, fake: FakeSlurm,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    the_plan = plan.build(run, fakes.run_record(run), None, None, None, False)
    needed = the_plan.host_bytes
    assert job.reason_for(None, the_plan, "slurm", needed) == ""
    assert job.reason_for(None, the_plan, "slurm", None) == ""  # unknown memory: here
    assert job.reason_for(None, the_plan, "slurm", needed - 1).startswith(
        "the export holds about 0.8 KiB of host memory, this machine has")
    assert job.reason_for(None, the_plan, "local", 0) == ""  # a local job runs here anyway
    assert job.reason_for(True, the_plan, "local", None) == "--job"
    assert job.reason_for(False, the_plan, "slurm", 0) == ""
    monkeypatch.setattr(plan, "available_memory", lambda: 1)
    done = commands.export(str(run))
    assert done.job is not None and done.job.reason.startswith("the export holds about")
    assert len(fake.calls("sbatch")) == 1


def _pyxis_run(tmp_path: Path) -> Path:
    run = fakes.run_dir(tmp_path, scheduler="slurm", site="h100-pyxis")
    (run / "spec.json").write_text(json.dumps({"site": "h100-pyxis",
                                               "python": "/opt/venv/bin/python", "spec": {}}))
    fakes.checkpoint(run, 4)
    return run


def test_the_export_job_carries_the_site_profile(tmp_path: Path, fake: FakeSlurm) -> None:
    """h100-pyxis: sbatch has the profile's account, QOS and partition; the script runs the
    profile's python inside its pyxis container (an srun step), never on the bare node."""
    run = _pyxis_run(tmp_path)
    commands.export(str(run), job=True)
    (call,) = fake.calls("sbatch")
    assert {"--account=my-project", "--qos=normal", "--partition=gpu", "--time=120",
            "--nodes=1", "--ntasks=1"} <= set(call["argv"])
    text = (run / "export-job-1.sh").read_text()
    line = next(w for w in text.splitlines() if "hpc_grpo.cli export" in w)
    assert line.startswith("srun --ntasks=1 --container-image 'nvcr.io#nvidia/pytorch:25.09-py3' "
                           "--container-mounts /lustre:/lustre,/home:/home "
                           "/opt/venv/bin/python -m hpc_grpo.cli export ")
    assert "\nexport NCCL_IB_DISABLE=0\n" in text  # the profile's env


def test_the_export_jobs_time_is_capped_at_the_sites_max_time(tmp_path: Path,
                                                             fake: FakeSlurm) -> None:
    sites = tmp_path / "sites"  # the user's site folder (hpc_home): h100-pyxis, 45 minutes at most
    sites.mkdir(exist_ok=True)
    shipped = SITE_CONFIGS / "h100-pyxis.yaml"
    (sites / "h100-pyxis.yaml").write_text(
        shipped.read_text().replace('max_time: "2-00:00:00"', 'max_time: "00:45:00"'))
    run = _pyxis_run(tmp_path)
    commands.export(str(run), job=True)
    (call,) = fake.calls("sbatch")
    assert "--time=45" in call["argv"] and "--time=120" not in call["argv"]
    assert job.TIME_MIN == 120
