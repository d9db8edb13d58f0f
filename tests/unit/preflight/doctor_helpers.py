"""Doctor test helpers: a node's report and a fake srun (moved out of test_doctor.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.preflight import doctor
from tests.paths import REPO

GOOD = {"torch": "2.7.1+cu126", "trl": "1.16.0", "vllm": "0.24.0", "transformers": "4.57.1",
        "deepspeed": "0.19.8", "accelerate": "1.10.0", "peft": "0.17.1"}


def report(node: str, node_id: int, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": 1, "node": node, "node_id": node_id, "num_nodes": 2, "job_id": 5,
        "python": "3.11.7", "hpc_grpo": doctor.__version__, "versions": dict(GOOD),
        "trl_vllm_requirement": ">=0.22.0,<=0.31.0", "hosts": ["gpu1", "gpu2"],
        "resolve": {"gpu1": {"ok": True, "detail": "10.0.0.1"},
                    "gpu2": {"ok": True, "detail": "10.0.0.2"}},
        "scontrol": {"ok": True, "detail": "/usr/bin/scontrol"},
        "interface": {"ok": True, "detail": "ib0 up"},
        "gpus": {"count": 8, "source": "nvidia-smi -L"},
    }
    if node_id == 0:
        base["port"] = {"ok": True, "detail": "port 20005 = 20000 + job 5 % 10000 is free"}
        base["share_write"] = {"ok": True, "detail": "wrote /shared/.hpc-grpo-doctor-x"}
    else:
        base["share_read"] = {"ok": True, "detail": "read the token gpu1 wrote in /shared"}
    return {**base, **overrides}


def install_fake_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, srun: str) -> Path:
    """srun (the given script, which runs the command on this host as node 0), scontrol and
    sinfo (FAKE_SINFO, default one node) on PATH; returns the log srun writes its argv to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(srun.format(python=sys.executable))
    (bin_dir / "scontrol").write_text(  # show hostnames A,B; show config: FAKE_SCONTROL_CONFIG
        '#!/bin/sh\nif [ "$2" = config ]; then cat "${FAKE_SCONTROL_CONFIG:-/dev/null}"; exit; fi\n'
        'echo "$3" | tr , "\\n"\n')
    (bin_dir / "sinfo").write_text('#!/bin/sh\nprintf "${FAKE_SINFO-node1\\n}"\n')
    for name in ("srun", "scontrol", "sinfo"):
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "srun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return log
