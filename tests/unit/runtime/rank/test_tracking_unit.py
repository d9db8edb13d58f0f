"""Experiment tracking decisions (#16), pure: W&B's stable run id and environment, TensorBoard's
purge step, the highest step the trackers already have, and the sync command status prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runs import track, views
from hpc_grpo.runtime.rank.observe import tracking


@pytest.mark.parametrize(("report_to", "names"), [
    ("none", ()), (None, ()), ([], ()), ("wandb", ("wandb",)),
    (["wandb", "tensorboard"], ("wandb", "tensorboard")), (["none"], ()),
])
def test_reporters(report_to: object, names: tuple[str, ...]) -> None:
    assert tracking.reporters(report_to) == names


def test_wandb_run_id_is_stable_and_safe() -> None:
    assert tracking.wandb_run_id("tiny-cpu-0007") == "tiny-cpu-0007"
    odd = tracking.wandb_run_id("exp:1/a?b")
    assert odd == tracking.wandb_run_id("exp:1/a?b")  # every attempt derives the same id
    assert not set(odd) & set("/\\#?%:") and odd.startswith("exp-1-a-b-")
    assert odd != tracking.wandb_run_id("exp-1-a-b")  # a hash keeps two runs apart
    assert len(tracking.wandb_run_id("x" * 200)) <= 64


def test_tracker_env_offline_by_default_user_mode_wins(tmp_path: Path) -> None:
    env = tracking.tracker_env("r-0001", tmp_path, ["wandb", "tensorboard"], {})
    assert env == {"WANDB_RUN_ID": "r-0001", "WANDB_RESUME": "allow", "WANDB_DIR": str(tmp_path),
                   "WANDB_MODE": "offline", "WANDB_PROJECT": "hpc-grpo",
                   "TENSORBOARD_LOGGING_DIR": str(tmp_path / "tensorboard")}
    online = tracking.tracker_env("r-0001", tmp_path, ["all"],
                                  {"WANDB_MODE": "online", "WANDB_PROJECT": "math"})
    assert (online["WANDB_MODE"], online["WANDB_PROJECT"]) == ("online", "math")
    assert tracking.sync_command(tmp_path, online) == ""
    assert tracking.tracker_env("r", tmp_path, ["mlflow"], {}) == {}
    assert tracking.sync_command(Path("/runs/my run"), env) == \
        "wandb sync --project hpc-grpo '/runs/my run/wandb'/offline-run-*"


@pytest.mark.parametrize(("state", "steps", "resume", "through", "purge"), [
    ({}, [], 0, 0, None),  # a first attempt
    ({}, [1, 2, 3, 4], 4, 4, None),  # preempted: saved the step it stopped at
    ({}, [1, 2, 3, 4, 5, 6], 4, 6, 5),  # crashed two steps past its checkpoint
    ({"tracker_logged_through": 6}, [1, 2, 3, 4], 4, 6, 5),  # a crash again before step 6
    ({}, [1, 2], 0, 2, 1),  # crashed before the first checkpoint
])
def test_logged_through_and_purge_step(state: dict[str, int], steps: list[int], resume: int,
                                       through: int, purge: int | None) -> None:
    got = tracking.logged_through(RunState.from_dict(state), steps)
    assert got == through
    assert tracking.purge_step(resume, got) == purge


def test_prepare_records_through_before_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_DIR", "WANDB_RESUME",
                "TENSORBOARD_LOGGING_DIR"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    assert tracking.prepare("r-1", tmp_path, ("wandb",), RunState(), lead=True) == 3
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["tracker_logged_through"] == 3
    assert state["tracker_sync"].startswith("wandb sync --project hpc-grpo ")
    assert tracking.prepare("r-1", tmp_path, (), RunState(), lead=True) == 0  # no tracker: nothing set


def test_status_prints_the_sync_command(capsys: pytest.CaptureFixture[str]) -> None:
    row = track.RunStatus(
        run_id="r-1", run_dir="/runs/r-1", site="sandbox", job_id="5", state="COMPLETED",
        finished=True, meaning="", phase="done", step=8, max_steps=8, reward=1.0,
        tokens_per_s=None, checkpoint_step=8, checkpoint_time=None, requeues=2, nodes="node1",
        tracker_sync="wandb sync --project hpc-grpo /runs/r-1/wandb/offline-run-*")
    views.status_table([row])
    out = capsys.readouterr().out
    assert "r-1: W&B offline run; upload it with: wandb sync --project hpc-grpo " \
           "/runs/r-1/wandb/offline-run-*" in out


def _wandb_file(path: Path, steps: list[int], torn: bool) -> None:
    """A W&B transaction log as wandb writes it: header, then one FULL record per history row
    (the block layout of wandb_log.py); ``torn`` cuts a last record short, as a kill does."""
    pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    out = bytearray(b":W&B\xbe\xe1\x01")
    for step in steps:
        record = pb.Record()
        item = record.history.item.add()
        item.key, item.value_json = "train/global_step", json.dumps(step)
        data = record.SerializeToString()
        out += len(data).to_bytes(4, "little") + len(data).to_bytes(2, "little") + b"\x01" + data
    if torn:
        out += (0).to_bytes(4, "little") + (500).to_bytes(2, "little") + b"\x01" + b"\x08" * 10
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(out))


def test_wandb_files_say_which_steps_w_and_b_has(tmp_path: Path) -> None:
    from hpc_grpo.runtime.rank.observe import wandb_log

    assert wandb_log.highest_step(tmp_path, "r-1") is None
    _wandb_file(tmp_path / "wandb" / "offline-run-20261124_090000-r-1" / "run-r-1.wandb", [1, 2, 3], False)
    _wandb_file(tmp_path / "wandb" / "offline-run-20261124_091000-r-1" / "run-r-1.wandb", [4, 5], True)
    _wandb_file(tmp_path / "wandb" / "offline-run-20261124_092000-r-2" / "run-r-2.wandb", [9], False)
    assert wandb_log.highest_step(tmp_path, "r-1") == 5  # another run's file is not read


@pytest.mark.parametrize("sync", ["wandb sync --project hpc-grpo {run}/wandb/offline-run-*", ""])
def test_wait_summary_prints_the_sync_command(
    sync: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`submit --wait` / `resume --wait` end in follow(): a finished offline W&B run must say how
    to upload it there too, read from state.json as the ranks left it, and only when there is one."""
    from tests.unit.slurmfake import make_run

    monkeypatch.delenv("COLUMNS", raising=False)  # off a terminal nothing wraps (runs/terminal.py)
    run_dir = make_run(tmp_path / "runs", "r-1", phase="done", step=10, site="local")
    command = sync.format(run=run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    (run_dir / "state.json").write_text(json.dumps({**state, "tracker_sync": command}))
    assert views.follow(run_dir, api.progress, poll=0.01) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "W&B" in line]
    assert lines == ([f"W&B offline run; upload it with: {command}"] if command else [])
    assert "run r-1: COMPLETED, phase done" in err
