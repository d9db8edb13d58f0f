"""A profile's `modules:` on the real sandbox cluster (#16), with Debian's Lmod and the module
tree tests/cluster/sandbox.sh writes (hpc-grpo-test/1.0 sets HPC_GRPO_TEST_MODULE and puts its
bin/ first on PATH): the ranks of a check job see both, doctor loads the module on the nodes,
and a module that does not exist fails the job at once, named by status and the job's log."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cluster.clusterlib import cli, finished, submit, wait_for
from tests.paths import SITE_CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("sandbox_cluster")]
SANDBOX = SITE_CONFIGS / "sandbox.yaml"
MODULE = "hpc-grpo-test/1.0"
MODULE_BIN = "/opt/hpc-grpo-test-module/1.0/bin"


@pytest.fixture(autouse=True)
def lmod_tree() -> None:
    if not Path("/usr/share/lmod/lmod/init/bash").exists() or \
            not Path("/etc/lmod/modules/hpc-grpo-test/1.0.lua").exists():
        pytest.skip("no Lmod or test module tree: `bash tests/cluster/sandbox.sh start` installs them")


def profile(tmp_path: Path, *modules: str) -> str:
    path = tmp_path / "sandbox-modules.yaml"
    path.write_text(SANDBOX.read_text() + "modules:\n" + "".join(f"  - {m}\n" for m in modules))
    return str(path)


def test_ranks_see_the_module_and_doctor_loads_it(tmp_path: Path) -> None:
    site = profile(tmp_path, MODULE)
    run_id, _, run_dir = submit(tmp_path / "runs", "--site", site, "--model", "builtin:tiny",
                                "--nodes", "2", "--procs-per-node", "1", "--payload", "check")
    row = wait_for(run_id, finished, timeout=120)
    assert row["state"] == "COMPLETED", row
    for rank in (0, 1):
        seen = json.loads((run_dir / "check" / f"rank-{rank}.json").read_text())
        assert seen["hpc_grpo_env"]["HPC_GRPO_TEST_MODULE"] == "1.0"
        assert MODULE_BIN in seen["path"]
        assert MODULE in seen["loaded_modules"].split(":")

    doctor = cli("doctor", "--site", site, "--nodes", "2", "--output-root", str(tmp_path),
                 "--json", timeout=150)
    rows = {r["check"]: r for r in json.loads(doctor.stdout)["rows"]}
    assert rows["modules"]["status"] == "pass" and rows["modules"]["detail"] == f"loaded {MODULE}"
    assert len(rows["modules"]["nodes"]) == 2


def test_a_missing_module_fails_the_job_at_once_by_name(tmp_path: Path) -> None:
    site = profile(tmp_path, MODULE, "hpc-grpo-nosuch/9")
    started = time.monotonic()
    run_id, job_id, run_dir = submit(tmp_path / "runs", "--site", site, "--model", "builtin:tiny",
                                     "--nodes", "1", "--procs-per-node", "1", "--payload", "check")
    row = wait_for(run_id, finished, timeout=90)
    assert time.monotonic() - started < 60  # no node task, no rank, no timeout waited out
    assert row["state"] == "FAILED" and row["phase"] == "failed", row
    assert row["cause"] == "job script"
    assert row["message"].startswith("module load hpc-grpo-nosuch/9 failed on node"), row
    text = cli("status", run_id).stdout
    assert "failed: job script: module load hpc-grpo-nosuch/9 failed on node" in text
    log = (run_dir / "submitit" / f"{job_id}_0_log.err").read_text()
    assert "hpc-grpo: module load hpc-grpo-nosuch/9 failed on node" in log
    assert "Traceback" not in log and not (run_dir / "check").exists()

    doctor = cli("doctor", "--site", site, "--nodes", "1", "--output-root", str(tmp_path),
                 "--json", check=False, timeout=150)
    assert doctor.returncode == 1
    rows = {r["check"]: r for r in json.loads(doctor.stdout)["rows"]}
    assert rows["modules"] == {"check": "modules", "status": "fail", "nodes": rows["modules"]["nodes"],
                               "detail": f"module load failed: hpc-grpo-nosuch/9 (loaded: {MODULE})"}
    assert rows["job"]["status"] == "pass"  # the node still reported everything else
