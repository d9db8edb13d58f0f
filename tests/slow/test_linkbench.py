"""linkbench with torch on this machine (#30): torchrun, 2 processes on one host, Gloo. One node,
so only the figure inside a node; the report travels in the probe's lines and in --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hpc_grpo.runtime.probe_lines import read_reports
from tests.paths import REPO


def test_two_processes_measure_inside_the_node(tmp_path: Path) -> None:
    out = tmp_path / "links.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone", "-m", "hpc_grpo.runtime.linkbench", "--sizes-mib", "1,4",
         "--max-seconds", "20", "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [r for r in read_reports(proc.stdout) if r.get("kind") == "links"]
    assert len(printed) == 1 and printed[0] == json.loads(out.read_text())
    report = printed[0]
    assert (report["backend"], report["nodes"], report["procs_per_node"]) == ("gloo", 1, 2)
    assert report["inter"] is None and 0.01 < report["intra"]["gbs"] < 1000
    assert report["intra"]["mib"] == 4 and report["elapsed_s"] < 20
