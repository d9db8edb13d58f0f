"""Doctor's scontrol row asks slurmctld (#16): ``scontrol show hostnames`` works in an image with
Slurm's binaries but no slurm.conf or munge, where ``scontrol requeue`` (the requeue path) then
fails, so the probe also runs ``scontrol show job $SLURM_JOB_ID``. A fake srun runs the real probe
here, and its report travels through the chunked lines (probe_lines) as on a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.runtime import probe
from hpc_grpo.runtime.probe_lines import read_reports, report_lines
from tests.unit.preflight.doctor_helpers import install_fake_srun
from tests.unit.preflight.modules_containers_helpers import FAKE_SRUN, doctor_json

# Names the allocation as `show hostnames` does; `show job` fails the way scontrol does in an
# image that cannot reach the controller (two lines: the detail must keep one).
FAKE_SCONTROL = """#!/bin/sh
echo "$*" >> "$FAKE_SCONTROL_LOG"
if [ "$1 $2" = "show job" ]; then
  if [ -n "$FAKE_NO_CONTROLLER" ]; then
    echo "scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
    echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
    exit 1
  fi
  echo "JobId=$3 JobName=hpc-grpo-doctor JobState=RUNNING"
  exit 0
fi
echo "$3" | tr , "\\n"
"""
PYXIS = "container:\n  runtime: pyxis\n  image: nvcr.io#nvidia/pytorch:25.01-py3\n"


@pytest.fixture
def scontrol_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """srun with pyxis (it runs the probe here as job 78) and this scontrol in place of
    install_fake_srun's; returns the log of scontrol's arguments."""
    install_fake_srun(tmp_path, monkeypatch, FAKE_SRUN)
    fake = tmp_path / "bin" / "scontrol"
    fake.write_text(FAKE_SCONTROL)
    fake.chmod(0o755)
    log = tmp_path / "scontrol.log"
    monkeypatch.setenv("FAKE_SCONTROL_LOG", str(log))
    monkeypatch.setenv("FAKE_PYXIS", "1")
    return log


def _scontrol_row(data: dict[str, Any]) -> dict[str, Any]:
    rows = [row for row in data["rows"] if row["check"] == "scontrol"]
    assert len(rows) == 1, rows
    return rows[0]


def test_scontrol_that_cannot_reach_slurmctld_fails_the_row(
    tmp_path: Path, scontrol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NO_CONTROLLER", "1")
    data = doctor_json(tmp_path, PYXIS)
    row = _scontrol_row(data)
    assert row["status"] == "fail" and data["exit_code"] == 1
    assert "show job 78 failed: slurm_load_jobs error: Unable to contact slurm controller" \
        in row["detail"]
    assert "slurm.conf and munge" in row["detail"] and "inside the pyxis container" in row["detail"]
    assert "\n" not in row["detail"]
    calls = scontrol_log.read_text().splitlines()
    assert calls[0].startswith("show hostnames ") and calls[1] == "show job 78"  # hostnames passed


def test_scontrol_that_reaches_slurmctld_passes(tmp_path: Path, scontrol_log: Path) -> None:
    row = _scontrol_row(doctor_json(tmp_path, PYXIS))
    assert row["status"] == "pass" and "reaches slurmctld" in row["detail"], row
    assert "show job 78" in scontrol_log.read_text().splitlines()


def test_without_a_job_id_only_hostnames_is_asked(tmp_path: Path, scontrol_log: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NO_CONTROLLER", "1")
    names, fact = probe.node_names("n1,n2")  # the fake splits, it does not expand
    assert names == ["n1", "n2"] and fact["ok"] is True
    assert scontrol_log.read_text().splitlines() == ["show hostnames n1,n2"]


def test_a_long_controller_error_survives_the_report_lines(
    tmp_path: Path, scontrol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding is longer than a chunk and holds quotes and a colon: it comes back whole."""
    monkeypatch.setenv("FAKE_NO_CONTROLLER", "1")
    _, fact = probe.node_names("n1", 4242)
    assert fact["ok"] is False and len(fact["detail"]) > 120
    lines = report_lines({"scontrol": fact, "node": "n1"}, key="k")
    assert all(len(line) < 300 for line in lines)
    assert read_reports("srun noise\n" + "\n".join(lines) + "\n") == [{"scontrol": fact, "node": "n1"}]
