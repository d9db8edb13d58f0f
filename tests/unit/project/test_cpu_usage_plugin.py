"""tests/cpu_usage.py, the plugin that says what each test costs CI in CPU seconds: a test whose
child process burns CPU is charged for it, and one that sleeps is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

SAMPLE = '''
import subprocess, sys, time

def test_child_burns() -> None:
    subprocess.run([sys.executable, "-c",
                    "import time\\nend = time.process_time() + 0.4\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_sleeps() -> None:
    time.sleep(0.4)
'''


def test_each_test_is_charged_its_childrens_cpu_and_not_its_sleep(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "cpu.jsonl"
    env = {**os.environ, "HPC_GRPO_CPU_USAGE": str(out),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.cpu_usage",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {json.loads(x)["test"].split("::")[1]: json.loads(x) for x in out.read_text().splitlines()}
    assert rows["test_child_burns"]["cpu_s"] >= 0.35, rows
    assert rows["test_child_burns"]["machine_cpu_s"] >= 0.3, rows  # the machine saw it too
    assert rows["test_sleeps"]["cpu_s"] < 0.2 <= rows["test_sleeps"]["wall_s"], rows
    assert "cpu s in all" in proc.stdout
