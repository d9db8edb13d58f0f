"""An error every rank raises alike before the first step is a configuration error: recorded as
such, never retried, and the job ends failed (issue #13). The decisions are pure; the file
exchange and the node task are tested with stand-ins for the ranks and for torchrun."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo import rundir
from hpc_grpo.rundir.contract import CONFIGURATION_ERROR, RETRIES_JSONL
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.node import retry
from hpc_grpo.runtime.node import task as node
from hpc_grpo.runtime.shared import setup_failure
from hpc_grpo.runtime.shared.setup_failure import common_error, exception_line, settle
from tests.unit.nodefake import fake_node, minimal_run
from tests.unit.runtime.node.config_error_node_helpers import _node_task

LINE = "ValueError: log_completions_hub_repo is set, but log_completions is False."


def rec(rank: int, line: str = LINE, attempt: str = "a", configuration: bool = True) -> dict[str, Any]:
    return {"attempt": attempt, "rank": rank, "line": line, "configuration": configuration}


# -- which failures are configuration errors (pure) ------------------------------------------

def test_every_rank_alike_is_a_configuration_error() -> None:
    assert common_error([rec(r) for r in range(4)], 4, "a") == LINE


@pytest.mark.parametrize(("records", "why"), [
    ([rec(0), rec(1), rec(2)], "rank 3 never failed (stuck, or failed later)"),
    ([rec(0), rec(1), rec(2), rec(3, "ValueError: other")], "one rank raised something else"),
    ([rec(0), rec(1), rec(2), rec(3, configuration=False)], "an error a retry may cure"),
    ([rec(0), rec(1), rec(2), rec(3, attempt="earlier")], "rank 3's record is an earlier attempt's"),
    ([rec(0), rec(1), rec(2), rec(7)], "a rank outside the world"),
])
def test_anything_less_is_not(records: list[dict[str, Any]], why: str) -> None:
    assert common_error(records, 4, "a") == "", why


def test_which_exceptions_can_be_configuration_errors() -> None:
    assert setup_failure.looks_like_configuration(ValueError("x"))
    assert setup_failure.looks_like_configuration(TypeError("'>' not supported"))
    assert not setup_failure.looks_like_configuration(RuntimeError("CUDA out of memory"))
    assert not setup_failure.looks_like_configuration(OSError("hub unreachable"))
    assert exception_line(ValueError("first\nsecond")) == "ValueError: first"
    assert exception_line(KeyError()) == "KeyError"


def test_retry_decision_never_retries_a_configuration_error() -> None:
    state = {"attempt": "slurm-7.0", "phase": "failed", "stop_cause": CONFIGURATION_ERROR,
             "message": LINE}
    typed = RunState.from_dict
    assert retry.configuration_error(typed(state), "slurm-7.0") == LINE
    assert retry.configuration_error(typed(state), "slurm-7.1") == ""  # another attempt's verdict
    assert retry.configuration_error(typed({**state, "stop_cause": "node failure"}), "slurm-7.0") == ""
    assert retry.configuration_error(typed({**state, "phase": "training"}), "slurm-7.0") == ""
    decision = retry.decide_retry([], 0, 3, LINE)  # first failure, retries left: still no
    assert not decision.requeue
    assert decision.reason == f"configuration error, not retried: {LINE}"
    assert retry.decide_retry([], 0, 3).requeue  # the same crash without the verdict


# -- the ranks compare notes through the run directory ---------------------------------------

def test_rank0_records_the_verdict_once_every_rank_reported(tmp_path: Path) -> None:
    setup_failure.record(tmp_path, "a", 1, ValueError(LINE.split(": ", 1)[1]))
    setup_failure.record(tmp_path, "old", 2, ValueError("an earlier attempt"))
    assert settle(tmp_path, "a", 0, 2, ValueError(LINE.split(": ", 1)[1]), wait_s=5) == LINE
    state = rundir.read_state(tmp_path)
    assert (state["phase"], state["stop_cause"], state["message"]) == (
        "failed", CONFIGURATION_ERROR, LINE)


def test_rank0_alone_is_not_a_configuration_error(tmp_path: Path) -> None:
    assert settle(tmp_path, "a", 0, 2, ValueError("only here"), wait_s=0.3, poll_s=0.05) == ""
    state = rundir.read_state(tmp_path)
    assert (state["phase"], state["stop_cause"], state["message"]) == (
        "failed", None, "ValueError: only here")


def test_other_ranks_wait_for_rank0_and_learn_its_verdict(tmp_path: Path) -> None:
    rundir.update_state(tmp_path, phase="starting", attempt="a")
    got: list[str] = []
    peer = threading.Thread(target=lambda: got.append(
        settle(tmp_path, "a", 1, 2, ValueError(LINE.split(": ", 1)[1]), wait_s=10, poll_s=0.05)))
    peer.start()
    assert settle(tmp_path, "a", 0, 2, ValueError(LINE.split(": ", 1)[1]), wait_s=10,
                  poll_s=0.05) == LINE
    peer.join(10)
    assert got == [LINE]


def test_a_rank_whose_rank0_never_decides_leaves_after_the_wait(tmp_path: Path) -> None:
    rundir.update_state(tmp_path, phase="training", attempt="a")  # rank 0 went on
    assert settle(tmp_path, "a", 3, 4, ValueError("x"), wait_s=0.2, poll_s=0.05) == ""
    assert json.loads((tmp_path / "setup-errors" / "rank-3.json").read_text())["line"] == \
        "ValueError: x"


# -- the node task: no requeue, and the job ends failed ---------------------------------------


def test_a_configuration_error_is_not_requeued_and_fails_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="failed", message=LINE,
                                 stop_cause=CONFIGURATION_ERROR)
    with pytest.raises(node.RunFailed, match="configuration error, not retried: ValueError"):
        node.NodeTask(str(run_dir))()
    assert called == []  # no scontrol requeue
    assert not (run_dir / RETRIES_JSONL).exists()
    state = rundir.read_state(run_dir)
    assert (state["message"], state["stop_cause"]) == (LINE, CONFIGURATION_ERROR)  # kept


def test_a_crash_is_still_requeued_and_spent_retries_fail_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    assert node.NodeTask(str(run_dir))() == 1  # requeued: submitit's result, not a failure
    called[:] = [argv for argv in called if argv[1] == "requeue"]  # not scontrol show (causes)
    assert called == [["scontrol", "requeue", "7"]]
    assert rundir.read_state(run_dir)["stop_cause"] == "task crash"  # Slurm named no bad node
    for _ in range(2):
        rundir.append_jsonl(run_dir / RETRIES_JSONL, {"checkpoint_step": 0})
    with pytest.raises(node.RunFailed, match="3 automatic retries spent"):
        node.NodeTask(str(run_dir))()  # before: returned 1, and Slurm said COMPLETED 0:0
    assert len([argv for argv in called if argv[1] == "requeue"]) == 1
    assert rundir.read_state(run_dir)["phase"] == "failed"


def test_hpc_grpo_resume_starts_a_fresh_retry_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 6 spent its retries and ended FAILED; the user fixed the cause and ran `hpc-grpo
    resume`, job 7. Its first crash is requeued: the earlier job's retries are not its own."""
    run_dir, called = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    for _ in range(3):
        rundir.append_jsonl(run_dir / RETRIES_JSONL, {"checkpoint_step": 0, "job_id": "6"})
    assert node.NodeTask(str(run_dir))() == 1  # requeued
    assert [argv for argv in called if argv[1] == "requeue"] == [["scontrol", "requeue", "7"]]
    assert rundir.read_jsonl(run_dir / RETRIES_JSONL)[-1]["job_id"] == "7"


def test_a_requeue_slurm_refuses_fails_the_job_with_slurms_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash's requeue went through an unchecked `scontrol requeue` with no time bound: a
    refused requeue (or a slurmctld that never answered) ended the run silently as requeued."""
    run_dir, _ = _node_task(tmp_path, monkeypatch, phase="training", step=3)

    def slurm_refuses(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "requeue":
            return subprocess.CompletedProcess(
                argv, 1, "", "scontrol: error: Requeue of job 7 not allowed: Job is pending\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(node.subprocess, "run", slurm_refuses)
    with pytest.raises(node.RunFailed, match="requeue failed: scontrol requeue 7 failed: "
                                             "scontrol: error: Requeue of job 7 not allowed"):
        node.NodeTask(str(run_dir))()
    state = rundir.read_state(run_dir)
    assert state["phase"] == "failed" and state["message"].startswith("requeue failed")


# -- issue #27: what the ranks report decides, and ImportErrors are never retried --------------

FLASH = ("FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
         "the package flash_attn seems to be not installed. Please refer to the documentation of "
         "https://huggingface.co/docs/transformers/perf_infer_gpu_one#flashattention-2 to install "
         "Flash Attention 2.")


def _two_rank_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   raised: dict[int, BaseException], **state: Any) -> tuple[Path, list[list[str]]]:
    """Job 7's node task over two ranks: its torchrun stand-in leaves ``state`` (as rank 0 left
    it) and each rank's ``setup-errors/rank-N.json`` as setup_failure.record writes it."""
    run_dir = minimal_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**record, "procs_per_node": 2, "world_size": 2}))

    def ranks_fail() -> int:
        rundir.update_state(run_dir, attempt="slurm-7.0", **state)
        for rank, exc in raised.items():
            setup_failure.record(run_dir, "slurm-7.0", rank, exc)
        return 1

    return run_dir, fake_node(monkeypatch, "7", ranks_fail)


@pytest.mark.parametrize(("raised", "state", "line"), [
    # every rank: transformers' ImportError loading with flash_attention_2 (the issue's run);
    # rank 0 wrote its line without a verdict, as before this change
    ({0: ImportError(FLASH), 1: ImportError(FLASH)}, {"phase": "failed"},
     f"ImportError: {FLASH.splitlines()[0]}"),
    # a reward module raising at import on rank 1 only: rank 0 went on and hung in the first
    # collective until torchrun ended it
    ({1: ModuleNotFoundError("No module named 'my_rewards_dep'")}, {"phase": "training"},
     "ModuleNotFoundError: No module named 'my_rewards_dep'"),
    ({0: AttributeError("'Qwen2Config' object has no attribute 'rope_theta'"),
      1: AttributeError("'Qwen2Config' object has no attribute 'rope_theta'")},
     {"phase": "failed"}, "AttributeError: 'Qwen2Config' object has no attribute 'rope_theta'"),
    # the same RuntimeError line on every rank: a retry raises it again
    ({0: RuntimeError("CUDA error: no kernel image is available for execution on the device"),
      1: RuntimeError("CUDA error: no kernel image is available for execution on the device")},
     {"phase": "failed"}, "RuntimeError: CUDA error: no kernel image is available for execution"
                          " on the device"),
])
def test_the_node_task_reads_the_ranks_records_and_never_retries_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: dict[int, BaseException],
        state: dict[str, Any], line: str) -> None:
    run_dir, called = _two_rank_task(tmp_path, monkeypatch, raised, message="whatever", **state)
    with pytest.raises(node.RunFailed, match="configuration error, not retried"):
        node.NodeTask(str(run_dir))()
    assert [argv for argv in called if argv[1] == "requeue"] == []
    assert not (run_dir / RETRIES_JSONL).exists()
    state_now = rundir.read_state(run_dir)
    assert (state_now["phase"], state_now["stop_cause"], state_now["message"]) == (
        "failed", CONFIGURATION_ERROR, line)  # what status shows, until a resume


@pytest.mark.parametrize("raised", [
    {0: OSError("We couldn't connect to 'https://huggingface.co'"),
     1: OSError("We couldn't connect to 'https://huggingface.co'")},  # the hub may come back
    {0: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
     1: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")},
    {0: ValueError("a bad value on rank 0"), 1: ValueError("another on rank 1")},
    {1: RuntimeError("NCCL error on rank 1: unhandled system error")},  # one rank, a device
])
def test_what_a_retry_may_cure_is_still_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: dict[int, BaseException]) -> None:
    run_dir, called = _two_rank_task(tmp_path, monkeypatch, raised, phase="failed",
                                     message="x")
    assert node.NodeTask(str(run_dir))() == 1  # requeued
    assert [argv for argv in called if argv[1] == "requeue"] == [["scontrol", "requeue", "7"]]


def test_rank0_decides_at_once_on_an_import_error_of_any_rank(tmp_path: Path) -> None:
    setup_failure.record(tmp_path, "a", 1, ImportError(FLASH))
    line = settle(tmp_path, "a", 0, 2, RuntimeError("Connection reset by peer"), wait_s=2)
    assert line == f"ImportError: {FLASH}"
    assert rundir.read_state(tmp_path)["stop_cause"] == CONFIGURATION_ERROR


def test_a_run_that_ended_failed_names_its_cause_for_the_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #27: a resume after a FAILED job recorded its restart as "killed (no stop
    recorded)". The node task now leaves the last attempt's cause in state.json beside the
    line, and a failed phase without one still reads "failed"."""
    from hpc_grpo.runtime.rank.checkpoints import restart_record

    run_dir, _ = _node_task(tmp_path, monkeypatch, phase="training", step=3)
    for _ in range(3):
        rundir.append_jsonl(run_dir / RETRIES_JSONL, {"checkpoint_step": 0})
    with pytest.raises(node.RunFailed, match="3 automatic retries spent"):
        node.NodeTask(str(run_dir))()
    state = rundir.read_state(run_dir)
    assert (state["phase"], state["stop_cause"]) == ("failed", "task crash")
    assert restart_record.restart_cause(RunState.from_dict(state), run_dir) == "task crash"
    assert restart_record.restart_cause(RunState(attempt="slurm-7.0", phase="failed"), run_dir) == "failed"
