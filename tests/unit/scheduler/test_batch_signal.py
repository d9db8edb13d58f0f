"""A USR2 sent to the batch shell alone (`scancel --signal=USR2 --batch`) reaches the node tasks
through srun, and the script still ends with srun's own exit status (issue #13: it used to end
the shell and the job FAILED). Runs the tail of the golden sbatch script with a stand-in srun."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpc_grpo.rundir.contract import StopBlock, recorded_stop_signals
from tests.paths import GOLDEN

FAKE_SRUN = """#!/bin/bash
trap 'echo "USR2" >> "$FAKE_OUT"; exit 7' USR2
trap 'echo "USR1" >> "$FAKE_OUT"; exit 9' USR1
sleep 0.2  # the shell has stored $! by then (the trap itself is set before srun starts)
echo started >> "$FAKE_OUT"
[ -n "${FAKE_RC:-}" ] && exit "$FAKE_RC"
while :; do sleep 0.05; done
"""


def _tail(name: str) -> str:
    """The script after its last export: what starts the node tasks and waits for them."""
    text = (GOLDEN / name).read_text().split("\n#### summary")[0]  # the golden file adds a summary
    start = text.index("\n", text.index("\nexport SUBMITIT_PREEMPT_SIGNAL=") + 1)
    return text[start + 1:]


def _start(tmp_path: Path, name: str, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "srun").chmod(0o755)
    out = tmp_path / "out"
    full = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_OUT=str(out), **env)
    proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + _tail(name)], env=full)
    deadline = time.monotonic() + 10
    while not (out.exists() and "started" in out.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the stand-in srun never started"
        time.sleep(0.02)
    return proc, out


@pytest.mark.parametrize("name", ["sandbox-2n-tiny.sbatch", "h100-4n-qwen72b.sbatch"])
def test_usr2_to_the_batch_shell_reaches_srun(tmp_path: Path, name: str) -> None:
    proc, out = _start(tmp_path, name)
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=10) == 7  # srun's status, not the shell killed by USR2 (140)
    assert out.read_text().split() == ["started", "USR2"]


def test_the_script_ends_with_sruns_exit_status(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path, "sandbox-2n-tiny.sbatch", FAKE_RC="3")
    assert proc.wait(timeout=10) == 3


def batch_signals(requeue_signal: str) -> tuple[str, ...]:
    return StopBlock(recorded_stop_signals(requeue_signal)).forwarded_by_batch_shell()


def test_which_signals_the_batch_shell_passes_on() -> None:
    assert batch_signals("USR2") == ("USR2",)
    assert batch_signals("USR1") == ("USR2", "USR1")
    assert batch_signals("TERM") == ("USR2",)  # Slurm sends TERM to the steps itself


def test_the_stop_set_always_holds_usr2_and_term() -> None:
    """The node task, the ranks and the batch shell read one set: USR2 and TERM whatever the
    profile says, and its own signal besides (an old run.json's block without USR2 too)."""
    assert StopBlock(("TERM", "USR1")).every() == ("USR2", "TERM", "USR1")
    assert StopBlock(("SIGUSR1",)).every() == ("USR2", "TERM", "USR1")
    assert StopBlock().every() == ("USR2", "TERM")
