"""A rank killed by the kernel's OOM killer is recorded with that cause, and an OOM kill (or a
full disk) that repeats from the same checkpoint is not retried (#15). The counters are read
from a cgroup tree laid out as the kernel does; the node task runs with a torchrun stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import RETRIES_JSONL
from hpc_grpo.runtime.node import oom, retry
from hpc_grpo.runtime.node import task as node
from tests.unit.nodefake import fake_node, minimal_run

# memory.events of a Slurm step's cgroup v2 after one OOM kill (kernel 6.1 fields).
EVENTS_V2 = "low 0\nhigh 0\nmax 212\noom 1\noom_kill 1\noom_group_kill 0\n"
OOM_CONTROL_V1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
STEP = "/system.slice/slurmstepd.scope/job_41/step_batch/user/task_0"


def _cgroup_v2(root: Path, kills: int) -> Path:
    folder = root / STEP.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.events").write_text(EVENTS_V2.replace("oom_kill 1", f"oom_kill {kills}"))
    return folder / "memory.events"


def test_the_counter_file_of_a_v2_and_a_v1_cgroup(tmp_path: Path) -> None:
    events = _cgroup_v2(tmp_path, 0)
    assert oom.counter_file(f"0::{STEP}\n", tmp_path) == events
    v1 = tmp_path / "memory" / "slurm" / "uid_0" / "job_9" / "memory.oom_control"
    v1.parent.mkdir(parents=True)
    v1.write_text(OOM_CONTROL_V1)
    hybrid = "12:pids:/slurm\n4:memory:/slurm/uid_0/job_9\n1:name=systemd:/x\n0::/\n"
    assert oom.counter_file(hybrid, tmp_path) == v1  # v2 root has no memory.events: v1's
    assert oom.counter_file("4:memory:/nowhere\n", tmp_path) is None
    assert oom.oom_kills(EVENTS_V2) == 1 and oom.oom_kills(OOM_CONTROL_V1) == 3
    assert oom.oom_kills("low 0\nhigh 0\n") is None


def test_this_machine_reads_without_error() -> None:
    kills, where = oom.read_kills()  # v1 or v2 or none: never raises
    assert (kills is None) == (where == "") or kills is None


def test_a_rise_is_an_oom_kill() -> None:
    line = oom.killed_line(0, 2, "/sys/fs/cgroup/x/memory.events", "gpu1")
    assert line.startswith("the kernel's OOM killer ended 2 processes of this job on gpu1")
    assert "oom_kill 0 -> 2" in line
    assert oom.killed_line(1, 1, "f", "h") == "" and oom.killed_line(None, 3, "f", "h") == ""


def test_the_same_resource_failure_twice_from_one_checkpoint_stops() -> None:
    first = retry.decide_retry([], 40, 5, cause="out of memory")
    assert first.requeue
    earlier = [{"checkpoint_step": 40, "cause": "out of memory"}]
    again = retry.decide_retry(earlier, 40, 5, cause="out of memory")
    assert not again.requeue and again.reason.startswith("out of memory twice from checkpoint step 40")
    assert retry.decide_retry(earlier, 50, 5, cause="out of memory").requeue  # progress since
    assert retry.decide_retry(earlier, 40, 5, cause="node failure").requeue  # another cause
    full = [{"checkpoint_step": 8, "cause": "disk full"}]
    assert not retry.decide_retry(full, 8, 5, cause="disk full").requeue


def _oom_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[list[str]]]:
    """A node task under Slurm job 41 whose torchrun stand-in's rank is OOM-killed at step 7:
    state.json stays at phase training, the cgroup's oom_kill count rises, torchrun exits 1."""
    run_dir = minimal_run(tmp_path)
    cgroups = tmp_path / "cgroup"
    _cgroup_v2(cgroups, 0)
    proc_cgroup = tmp_path / "proc-self-cgroup"
    proc_cgroup.write_text(f"0::{STEP}\n")
    monkeypatch.setattr(oom, "CGROUP_ROOT", cgroups)
    monkeypatch.setattr(oom, "read_kills", lambda: oom.__dict__["_real"](proc_cgroup, cgroups))

    def killed_at_step_7() -> int:
        rundir.update_state(run_dir, attempt="slurm-41.0", phase="training", step=7,
                            last_checkpoint_step=5)
        kills = oom.oom_kills((cgroups / STEP.lstrip("/") / "memory.events").read_text()) or 0
        _cgroup_v2(cgroups, kills + 1)
        return 1

    called = fake_node(monkeypatch, "41", killed_at_step_7)
    return run_dir, called


oom.__dict__["_real"] = oom.read_kills


def test_an_oom_killed_rank_is_recorded_requeued_once_then_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, called = _oom_node(tmp_path, monkeypatch)
    assert node.NodeTask(str(run_dir))() == 1  # first OOM from checkpoint 5: one retry
    state = rundir.read_state(run_dir)
    assert state["stop_cause"] == "out of memory"
    assert "OOM killer ended 1 process of this job" in state["message"]
    assert called == [["scontrol", "requeue", "41"]]
    assert rundir.read_jsonl(run_dir / RETRIES_JSONL)[0]["cause"] == "out of memory"
    with pytest.raises(node.RunFailed, match="out of memory twice from checkpoint step 5"):
        node.NodeTask(str(run_dir))()  # the same OOM again: deterministic, the job fails
    state = rundir.read_state(run_dir)
    assert (state["phase"], state["stop_cause"]) == ("failed", "out of memory")
    assert len(called) == 1
