"""The fake srun and doctor run of the modules/containers tests, shared with the controller tests
(moved out of test_modules_containers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hpc_grpo.cli import main
from tests.paths import REPO

FAKE_SRUN = """#!{python}
import os, socket, subprocess, sys
args = sys.argv[1:]
if args == ["--help"]:
    print("Usage: srun [OPTIONS]\\n  -N, --nodes=N")
    if os.environ.get("FAKE_PYXIS"):
        print("  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH")
    sys.exit(0)
with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
while args[0].startswith("--"):
    if args.pop(0) in ("--container-image", "--container-mounts"):
        args.pop(0)
env = dict(os.environ, SLURM_NODEID="0", SLURM_JOB_NUM_NODES="1", SLURM_JOB_ID="78",
           SLURM_JOB_NODELIST=socket.gethostname())
sys.exit(subprocess.run(args, env=env).returncode)
"""


def doctor_json(tmp_path: Path, extra: str) -> dict[str, Any]:
    site = tmp_path / "one.yaml"
    site.write_text((REPO / "site_configs" / "sandbox.yaml").read_text() + extra)
    result = CliRunner().invoke(main, ["doctor", "--nodes", "1", "--site", str(site), "--json",
                                       "--output-root", str(tmp_path / "out")],
                                catch_exceptions=False)
    data: dict[str, Any] = json.loads(result.output)
    return data
