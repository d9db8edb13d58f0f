"""A recipe's push_to_hub as the step after training (export/hub_step.py, runtime/node/hub_push.py):
run.json's hub block by the site's nodes_online, the plan's warnings, `status`'s push pending,
and the rank-0 node task's command (a stand-in Python records it)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.config.site import find_site
from hpc_grpo.config.spec import build_spec
from hpc_grpo.errors import UserError
from hpc_grpo.export import hub_step
from hpc_grpo.rundir import append_jsonl
from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hub import HubBlock, push_command
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.node import hub_push
from tests.unit.export import fakes

HUB = {"push_to_hub": True, "hub_model_id": "my-org/tiny-grpo"}


def _spec(**over: object):  # type: ignore[no-untyped-def]
    return build_spec({"model": "builtin:tiny", **HUB, **over}, {}, {})


def test_online_nodes_push_at_the_end_offline_ones_leave_the_command() -> None:
    local, offline = find_site("local"), find_site("h100-pyxis")  # nodes_online true / false
    assert "push_to_hub" not in _spec().grpo  # a job setting, never given to GRPOConfig
    assert hub_step.hub_block(_spec(), local) == HubBlock("my-org/tiny-grpo", None, on_node=True)
    assert hub_step.hub_block(_spec(hub_private_repo=True), offline) == HubBlock(
        "my-org/tiny-grpo", True, on_node=False)
    (on_node,) = hub_step.notes(_spec(), local)
    assert "rank 0's node task exports the last checkpoint and pushes it to my-org/tiny-grpo" in on_node
    strategy, later = hub_step.notes(_spec(hub_strategy="every_save"), offline)
    assert strategy.startswith("hub_strategy every_save: hpc-grpo pushes once")
    assert later == ("push_to_hub: site 'h100-pyxis' nodes do not reach the hub (nodes_online: "
                     "false): when the run is done, on the login node: `hpc-grpo export RUN "
                     "--push my-org/tiny-grpo` with this run's id (`status` shows the push pending)")
    assert hub_step.notes(_spec(push_to_hub=False), local) == ()
    assert hub_step.hub_block(_spec(hub_model_id=""), local) is None
    assert "without hub_model_id" in hub_step.notes(_spec(hub_model_id=""), local)[0]
    with pytest.raises(UserError, match="hub_model_id: not a hub repository name"):
        hub_step.hub_block(_spec(hub_model_id="a/b/c"), local)


def test_run_json_holds_the_block_only_when_asked(tmp_path: Path) -> None:
    record = json.loads((fakes.run_dir(tmp_path) / "run.json").read_text())
    record.update(nodes=1, procs_per_node=1)
    plain = RunRecord.from_dict(record)
    assert plain.hub is None and "hub" not in plain.to_dict()
    hub = dataclasses.replace(plain, hub=HubBlock("org/x", False, True))
    again = RunRecord.from_dict(hub.to_dict())
    assert again.hub == HubBlock("org/x", False, True)
    assert push_command("r-1", again.hub) == "hpc-grpo export r-1 --push org/x --public"


def test_status_shows_the_push_pending_until_one_is_recorded(tmp_path: Path) -> None:
    run = fakes.run_dir(tmp_path, hub={"repo_id": "my-org/tiny-grpo", "private": None,
                                       "on_node": False})
    record = RunRecord.from_dict(json.loads((run / "run.json").read_text()))
    assert record.hub is not None
    assert hub_step.pending(run, record, "training") == ""
    assert hub_step.pending(run, record, "done") == \
        "push pending: hpc-grpo export tiny-0001 --push my-org/tiny-grpo"
    node = dataclasses.replace(record, hub=dataclasses.replace(record.hub, on_node=True))
    assert hub_step.pending(run, node, "done").startswith(
        "push pending (the node task pushes after training; once its job has ended, see "
        "logs/hub-push.log): hpc-grpo export")
    append_jsonl(run / "pushes.jsonl", {"step": 4, "repo_id": "my-org/tiny-grpo", "commit": "ab"})
    assert hub_step.pending(run, record, "done") == ""
    assert hub_step.pending(run, dataclasses.replace(record, hub=None), "done") == ""
    assert hub_step.pending(run, None, "done") == ""  # a record that cannot be read: no line


def _node_push(tmp_path: Path, script: str, *, private: bool | None
               ) -> tuple[Path, dict[str, Any], RunRecord, Path]:
    """A run directory whose run.json asks the node task to push, and a stand-in `python` that
    runs ``script`` in place of `hpc-grpo export`."""
    run_dir = fakes.run_dir(tmp_path)
    (run_dir / "logs").mkdir()
    record = json.loads((run_dir / "run.json").read_text())
    run = RunRecord.from_dict({**record, "nodes": 1, "procs_per_node": 1,
                               "hub": {"repo_id": "my-org/x", "private": private, "on_node": True}})
    python = tmp_path / "python"
    python.write_text(script.format(python=sys.executable))
    python.chmod(0o755)
    return run_dir, record, run, python


RECORDER = """#!{python}
import json, os, sys
print("exported and pushed")
with open(os.environ["RECORD_TO"], "w") as out:
    json.dump({{"argv": sys.argv[1:], "offline": os.environ.get("HF_HUB_OFFLINE")}}, out)
sys.exit(int(os.environ.get("RECORD_RC", "0")))
"""


@pytest.mark.parametrize("rc", [0, 3])
def test_the_node_task_runs_the_login_nodes_command_once_training_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        rc: int) -> None:
    run_dir, _, run, python = _node_push(tmp_path, RECORDER, private=True)
    monkeypatch.setenv("RECORD_TO", str(tmp_path / "seen.json"))
    monkeypatch.setenv("RECORD_RC", str(rc))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = RunState(phase="done", attempt="7")
    assert hub_push.at_end(run, RunState(phase="interrupted", attempt="7"), "7", str(python)) is None
    assert hub_push.at_end(run, done, "6", str(python)) is None  # an earlier attempt's end
    assert hub_push.at_end(dataclasses.replace(run, hub=HubBlock("my-org/x")), done, "7",
                           str(python)) is None  # offline nodes: the login node pushes
    assert hub_push.at_end(run, done, "7", str(python)) == rc
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"argv": ["-m", "hpc_grpo.cli", "export", str(run_dir), "--here", "--push",
                             "my-org/x", "--private"], "offline": "0"}  # never a nested job
    assert (run_dir / "logs" / "hub-push.log").read_text() == "exported and pushed\n"
    out = capsys.readouterr().out
    assert ("[node] push_to_hub: done" in out) == (rc == 0)
    assert ("failed (exit 3)" in out) == (rc == 3)


SLEEPER = """#!{python}
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.environ["RECORD_TO"], "w") as out:
    out.write(str(child.pid))
print("exporting", flush=True)
time.sleep(120)
"""


def test_the_push_is_bounded_by_the_jobs_time_left(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A push that outlasts the job's remaining time (less a margin to end cleanly) is killed
    with its children, said in one line of logs/hub-push.log; the run stays done, the push
    pending. Without a known time left, a stated default bounds it."""
    assert hub_push.timeout_s(None) == hub_push.DEFAULT_TIMEOUT_S
    assert hub_push.timeout_s(3600.0) == 3600.0 - hub_push.MARGIN_S
    assert hub_push.timeout_s(1.0) == 1.0  # at least a second
    run_dir, record, run, python = _node_push(tmp_path, SLEEPER, private=None)
    monkeypatch.setenv("RECORD_TO", str(tmp_path / "child.pid"))
    started = time.monotonic()
    rc = hub_push.at_end(run, RunState(phase="done", attempt="7"), "7", str(python),
                         left=hub_push.MARGIN_S + 2)
    assert rc == 124 and time.monotonic() - started < 30
    grandchild = int((tmp_path / "child.pid").read_text())
    for _ in range(50):  # the killed grandchild is reaped by init
        if not Path(f"/proc/{grandchild}").exists() or "Z" in _proc_state(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the export's own child outlived the timeout")
    log = (run_dir / "logs" / "hub-push.log").read_text().splitlines()
    assert log[0] == "exporting"
    assert log[-1] == ("hpc-grpo: push_to_hub stopped after 2 s (the job's time left, less 120 s "
                       "to end): on the login node, `hpc-grpo export tiny-0001 --push my-org/x`")
    assert "timed out after 2 s" in capsys.readouterr().out
    assert hub_step.pending(run_dir, run, "done").startswith(
        "push pending")


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"
