"""doctor without a cluster: version rules, report aggregation, the probe's pieces, and the CLI
end to end against a fake srun that runs the real probe on this machine."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.config.site import SiteProfile, load_site
from hpc_grpo.preflight import doctor
from hpc_grpo.preflight.doctor import Expect, Row
from hpc_grpo.rundir.contract import job_port
from hpc_grpo.runtime import probe, probe_lines
from tests.paths import REPO
from tests.unit.preflight.doctor_helpers import GOOD, install_fake_srun, report


@pytest.mark.parametrize(("version", "spec", "ok"), [
    ("2.6.0", ">=2.6,<2.15", True),
    ("2.14.9+cu128", ">=2.6,<2.15", True),
    ("2.15.0", ">=2.6,<2.15", False),
    ("2.5.1", ">=2.6,<2.15", False),
    ("1.16.3", ">=1.16,<1.17", True),
    ("1.17.0.dev0", ">=1.16,<1.17", False),
    ("0.31.0", ">=0.22.0,<=0.31.0", True),
    ("0.31.1", ">=0.22.0,<=0.31.0", False),
    ("0.22.0rc1", ">=0.22", True),  # a pre-release counts as its release
    ("1.16.2", "==1.16.*", True),
    ("1.17.0", "==1.16.*", False),
    ("1.16.4", "~=1.16.0", True),
    ("1.17.0", "~=1.16.0", False),
    ("0.19.2", "<=0.19.2", True),
    ("0.19.10", "<=0.19.2", False),
    ("4.56", "!=4.56.0", False),
])
def test_satisfies(version: str, spec: str, ok: bool) -> None:
    assert doctor.satisfies(version, spec) is ok


@pytest.mark.parametrize(("name", "version", "gpu_site", "status", "words"), [
    ("torch", "2.13.0+cpu", False, "pass", "2.6-2.14"),
    ("torch", "2.5.1", True, "fail", "outside supported 2.6-2.14"),
    ("trl", "1.17.0", True, "fail", "1.16.x"),
    ("trl", None, False, "fail", "not installed"),
    ("vllm", None, False, "pass", "CPU site"),
    ("vllm", None, True, "fail", "colocated generation needs it"),
    ("vllm", "0.32.0", True, "fail", "0.22-0.31"),
    ("vllm", "0.10.0", False, "warn", "unused on a CPU site"),
    ("transformers", "4.55.4", True, "fail", ">= 4.56"),
    ("deepspeed", "0.16.9", True, "fail", ">= 0.17"),
    ("accelerate", "1.4.0", True, "pass", ">= 1.4"),
    ("peft", "0.14.0", True, "fail", ">= 0.15"),
    ("peft", "weird", True, "fail", "not a version"),
])
def test_judge_package(name: str, version: str | None, gpu_site: bool, status: str,
                       words: str) -> None:
    got_status, detail = doctor.judge_package(name, version, gpu_site=gpu_site)
    assert got_status == status and words in detail


@pytest.mark.parametrize(("changes", "trl_vllm", "expected"), [
    ({}, ">=0.22.0,<=0.31.0",
     {"known: ZeRO-3 + LoRA": "pass", "known: vLLM vs TRL": "pass"}),
    ({"deepspeed": "0.19.2"}, "", {"known: ZeRO-3 + LoRA": "warn", "known: vLLM vs TRL": "pass"}),
    ({"vllm": "0.31.2"}, ">=0.22.0,<=0.31.0",
     {"known: ZeRO-3 + LoRA": "pass", "known: vLLM vs TRL": "fail"}),
    ({"vllm": "0.8.2"}, "", {"known: ZeRO-3 + LoRA": "pass", "known: vLLM vs TRL": "fail",
                             "known: vLLM TP seeds": "warn"}),
    ({"vllm": None, "deepspeed": None}, "", {}),
    ({"vllm": "0.24.0"}, "[garbled", {"known: ZeRO-3 + LoRA": "pass", "known: vLLM vs TRL": "pass"}),
])
def test_known_bad(changes: dict[str, str | None], trl_vllm: str, expected: dict[str, str]) -> None:
    rows = doctor.known_bad({**GOOD, **changes}, trl_vllm)
    assert {check: status for check, status, _ in rows} == expected
    if "deepspeed" in changes and changes["deepspeed"]:
        assert "ds_grads_remaining" in rows[0][2]


EXPECT = Expect(gpus_per_node=8, interface="ib0")


def statuses(rows: list[Row]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for row in rows:
        found.setdefault(row.check, set()).add(row.status)
    return found


def test_aggregate_all_pass_groups_nodes() -> None:
    rows = doctor.aggregate([report("gpu1", 0), report("gpu2", 1)], EXPECT)
    assert doctor.exit_code(rows) == 0
    assert rows[0].check == "job" and rows[0].nodes == ("gpu1", "gpu2")
    torch = next(r for r in rows if r.check == "torch")
    assert torch.nodes == ("gpu1", "gpu2") and "2.7.1" in torch.detail
    assert [r.nodes for r in rows if r.check == "rendezvous port"] == [("gpu1",)]
    assert [r.nodes for r in rows if r.check == "shared output"] == [("gpu1",), ("gpu2",)]
    assert [r.check for r in rows].index("torch") < [r.check for r in rows].index("gpus")


@pytest.mark.parametrize(("node2", "check", "status", "words"), [
    ({"interface": {"ok": False, "detail": "ib0 missing (have: eth0, lo)"}},
     "interface", "fail", "ib0: ib0 missing"),
    ({"gpus": {"count": 4, "source": "nvidia-smi -L"}}, "gpus", "fail", "4 seen"),
    ({"gpus": {"count": 16, "source": "nvidia-smi -L"}}, "gpus", "warn", "16 seen"),
    ({"scontrol": {"ok": False, "detail": "scontrol not on PATH of the compute node"}},
     "scontrol", "fail", "not on PATH"),
    ({"resolve": {"gpu1": {"ok": False, "detail": "Name or service not known"},
                  "gpu2": {"ok": True, "detail": "10.0.0.2"}}},
     "node names", "fail", "gpu1 (Name or service not known)"),
    ({"resolve": {"gpu1": {"ok": True, "detail": "10.0.0.1"},
                  "gpu2": {"ok": True, "detail": "127.0.1.1"}}},
     "node names", "warn", "loopback"),
    ({"resolve": {"ok": False, "detail": "probe error: OSError: boom"}},
     "node names", "fail", "probe error"),
    ({"gpus": {"ok": False, "detail": "probe error: OSError: boom"}}, "gpus", "fail", "probe error"),
    ({"share_read": {"ok": False, "detail": "not seen here after 20 s"}},
     "shared output", "fail", "not seen"),
    ({"versions": {**GOOD, "torch": "2.8.0"}}, "same stack", "warn", "2 different"),
    ({"hpc_grpo": ""}, "hpc-grpo", "warn", "not importable"),
])
def test_aggregate_names_the_bad_node(node2: dict[str, Any], check: str, status: str,
                                      words: str) -> None:
    rows = doctor.aggregate([report("gpu1", 0), report("gpu2", 1, **node2)], EXPECT)
    bad = [r for r in rows if r.check == check and r.status == status]
    assert len(bad) == 1 and words in bad[0].detail, rows
    if check != "same stack":
        assert bad[0].nodes == ("gpu2",)
    assert doctor.exit_code(rows) == (1 if status == "fail" else 0)


def test_aggregate_missing_node_and_no_report() -> None:
    rows = doctor.aggregate([report("gpu1", 0)], EXPECT, job_note="srun exit code 1: boom")
    assert rows[0] == Row("job", "fail", ("gpu2",), "no report from 1 of 2 node(s): srun exit code 1: boom")
    assert doctor.aggregate([], EXPECT, job_note="nothing") == [Row("job", "fail", (), "nothing")]


def test_interface_unset_is_skipped() -> None:
    rows = doctor.aggregate([report("gpu1", 0)], Expect(8, ""))
    assert statuses(rows)["interface"] == {"skip"}


def test_parse_reports_ignores_noise() -> None:
    lines = ["srun: job 5 queued", *probe_lines.report_lines(report("gpu2", 1)), "noise",
             probe_lines.MARKER + "{broken", probe_lines.MARKER + "k 0/2 {half",
             probe_lines.MARKER + json.dumps(report("gpu1", 0))]  # an older probe's one line
    assert [r["node"] for r in doctor.parse_reports("\n".join(lines))] == ["gpu1", "gpu2"]


def test_reports_cut_into_each_other_by_srun_are_put_back_together() -> None:
    """srun passes a merged line through whole only below its ~1 KiB buffer: the sandbox
    cluster's doctor once got node2's report in the middle of node1's (then no report at all)."""
    big = [dict(report(f"gpu{i}", i), padding="x" * 3000) for i in range(2)]
    per_node = [probe_lines.report_lines(r) for r in big]
    assert all(len(line) < 512 for lines in per_node for line in lines)
    merged = [line for pair in zip(*per_node, strict=True) for line in pair]  # alternating
    assert doctor.parse_reports("\n".join(merged)) == big
    assert doctor.parse_reports("\n".join(merged[1:])) == [big[1]]  # a lost chunk drops one


@pytest.mark.parametrize(("hostlist", "names"), [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("gpu[01-02,10],login1", ["gpu01", "gpu02", "gpu10", "login1"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a-[008-010]", ["a-008", "a-009", "a-010"]),
])
def test_expand_hostlist(hostlist: str, names: list[str]) -> None:
    assert probe.expand_hostlist(hostlist) == names


def test_probe_pieces(tmp_path: Path) -> None:
    assert probe.interface("hpcgrpo-no-such0")["ok"] is False
    assert "lo up" in probe.interface("lo")["detail"]
    assert probe.interface("^docker")["ok"] is True
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        assert probe.port(taken, taken, 7)["ok"] is False
    token = tmp_path / "share" / ".t"
    assert probe.write_token(token, "abc")["ok"]
    assert probe.read_token(token, "abc", 1, "n1")["ok"] and not token.exists()
    assert probe.read_token(token, "abc", 0.2, "n1")["ok"] is False


def test_srun_options_and_container_command() -> None:
    site = SiteProfile(name="x", partition="gpu", account="acct", gpus_per_node=8, gpu_type="h100",
                       gpu_request="gpus-per-node", modules=("cuda/12.4",))
    options = doctor.srun_options(site, 4, "gpu", 3)
    assert {"--nodes=4", "--ntasks-per-node=1", "--partition=gpu", "--account=acct",
            "--gpus-per-node=h100:8", "--time=3"} <= set(options)
    command = doctor.node_command(site, "/opt/py", ["--gpus", "8"])
    assert command[:2] == ["bash", "-c"]
    assert "for m in cuda/12.4; do" in command[2] and "exec /opt/py -m hpc_grpo.runtime.probe" in command[2]


# ---- the CLI against a fake srun that runs the real probe here, as a one-node job ----------

FAKE_SRUN = """#!{python}
import json, os, socket, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if os.environ.get("FAKE_SRUN") == "refuse":
    print("srun: error: Unable to allocate resources: Invalid partition name specified", file=sys.stderr)
    sys.exit(1)
if os.environ.get("FAKE_SRUN") == "hang":
    import time
    time.sleep(60)
if os.environ.get("FAKE_SRUN") == "crash":
    print("slurmstepd: error: execve(): python: No such file or directory", file=sys.stderr)
    sys.exit(2)
while args[0].startswith("--"):
    args.pop(0)
env = dict(os.environ, SLURM_NODEID="0", SLURM_JOB_NUM_NODES="1", SLURM_JOB_ID="77",
           SLURM_JOB_NODELIST=socket.gethostname())
sys.exit(subprocess.run(args, env=env).returncode)
"""


@pytest.fixture
def fake_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_srun(tmp_path, monkeypatch, FAKE_SRUN)


def one_node_site(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "one.yaml"
    path.write_text((REPO / "site_configs" / "sandbox.yaml").read_text() + extra)
    return path


def doctor_cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["doctor", "--nodes", "1", *args], catch_exceptions=False)


def test_cli_doctor_passes_and_json(tmp_path: Path, fake_srun: Path) -> None:
    site = one_node_site(tmp_path)
    result = doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "job 77: every node reported" in result.output and "FAIL" not in result.output
    argv = json.loads(fake_srun.read_text().splitlines()[0])
    assert "--nodes=1" in argv and "--partition=debug" in argv and "hpc_grpo.runtime.probe" in argv
    result = doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"), "--json")
    data = json.loads(result.output)
    assert data["exit_code"] == 0 and data["reports"][0]["job_id"] == 77
    assert not list((tmp_path / "out").iterdir())  # the token is cleaned up


def test_cli_doctor_reports_slurms_requeue_hold(tmp_path: Path, fake_srun: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's cred_expire (Slurm's default here: AuthInfo without it) is a warning
    that does not fail doctor; a controller that gives no config is a skipped row."""
    site = one_node_site(tmp_path)
    config = tmp_path / "config.txt"
    config.write_text("AuthAltTypes            = (null)\n"
                      "AuthInfo                = socket=/run/munge/munge.socket.2\n")
    monkeypatch.setenv("FAKE_SCONTROL_CONFIG", str(config))
    result = doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"), "--json")
    data = json.loads(result.output)
    row = next(r for r in data["rows"] if r["check"] == "requeue hold")
    assert row["status"] == "warn" and "waits 121 s" in row["detail"], row
    assert data["exit_code"] == 0
    monkeypatch.delenv("FAKE_SCONTROL_CONFIG")
    data = json.loads(doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"),
                                 "--json").output)
    assert next(r for r in data["rows"] if r["check"] == "requeue hold")["status"] == "skip"


def test_cli_doctor_warns_of_gpus_the_profile_leaves_unused(
        tmp_path: Path, fake_srun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sinfo's Gres shows 8 GPUs on the partition's node, the profile uses 4: a warning row
    (not a failure); where sinfo names no GPUs there is no such row."""
    monkeypatch.setenv("FAKE_SINFO", "node1|debug|gpu:h100:8(S:0-1)\\n")
    site = one_node_site(tmp_path)
    site.write_text(site.read_text().replace("gpus_per_node: 0", "gpus_per_node: 4"))
    data = json.loads(doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"),
                                 "--json").output)
    row = next(r for r in data["rows"] if r["check"] == "partition gpus")
    assert row["status"] == "warn" and "uses 4 GPUs per node but every node of partition " \
        "'debug' has 8 h100" in row["detail"], row
    monkeypatch.setenv("FAKE_SINFO", "node1|debug|(null)\\n")
    data = json.loads(doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"),
                                 "--json").output)
    assert "partition gpus" not in [r["check"] for r in data["rows"]]


def test_cli_doctor_missing_interface_fails(tmp_path: Path, fake_srun: Path) -> None:
    site = one_node_site(tmp_path, "network_interface: ib9\n")
    result = doctor_cli("--site", str(site), "--output-root", str(tmp_path / "out"))
    assert result.exit_code == 1
    line = next(line for line in result.output.splitlines() if line.split()[:1] == ["interface"])
    assert "FAIL" in line and "ib9 missing" in line and socket.gethostname() in line


def test_cli_doctor_job_that_never_ran(tmp_path: Path, fake_srun: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SRUN", "crash")
    result = doctor_cli("--site", str(one_node_site(tmp_path)))
    assert result.exit_code == 1 and "execve()" in result.output


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--site", "local"], "", "has no Slurm"),
    (["--site", "no-such-site"], "", "unknown site"),
    (["--site", "sandbox", "--nodes", "1", "--partition", "x"], "refuse", "srun refused the job"),
    (["--site", "sandbox", "--nodes", "2"], "", "partition 'debug' has 1"),
])
def test_cli_doctor_bad_input(tmp_path: Path, fake_srun: Path, monkeypatch: pytest.MonkeyPatch,
                              args: list[str], env: str, words: str) -> None:
    monkeypatch.setenv("FAKE_SRUN", env)
    result = CliRunner().invoke(main, ["doctor", *args], catch_exceptions=False)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0]


def test_cli_doctor_timeout_is_a_failed_check(tmp_path: Path, fake_srun: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SRUN", "hang")
    site = load_site(str(one_node_site(tmp_path)), [])
    start = time.monotonic()
    result = doctor.run(site, nodes=1, timeout_s=1)
    assert time.monotonic() - start < 20
    assert result.exit_code == 1 and "no answer within 1 s" in result.rows[0].detail


def test_cli_doctor_unknown_partition(tmp_path: Path, fake_srun: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SINFO", "")
    result = doctor_cli("--site", "sandbox", "--partition", "nope")
    assert result.exit_code == 2 and "partition 'nope' does not exist" in result.stderr
    assert not fake_srun.exists()  # nothing was submitted


@pytest.mark.parametrize("job_id", [3, 332, 333, 1000, 99_999])
def test_probe_checks_the_port_the_job_script_will_use(job_id: int) -> None:
    """The golden script's MASTER_PORT line, run by bash, gives the port the probe tries (it once
    tried 21000 + job % 1000 while the job used 21000 + (job % 333) x 3)."""
    script = (REPO / "tests" / "golden" / "sandbox-2n-tiny.sbatch").read_text()
    line = next(ln for ln in script.splitlines() if ln.startswith("export MASTER_PORT="))
    # the profile the golden script was rendered with
    low, high = load_site(str(REPO / "site_configs" / "sandbox.yaml"), []).port_range
    shell = subprocess.run(["bash", "-c", f"SLURM_JOB_ID={job_id}; {line}; echo $MASTER_PORT"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert int(shell) == job_port(low, high, job_id)
    detail = probe.port(low, high, job_id)["detail"]
    assert detail.startswith(f"ports {shell}-{int(shell) + 2} ") or f"port {shell} " in detail


def test_probe_counts_the_gpus_slurm_gave_the_task() -> None:
    """Two nodes of one host each see their one GPU; nvidia-smi would list both (a false WARN)."""
    assert probe.gpus(1, {"CUDA_VISIBLE_DEVICES": "1"}) == {
        "count": 1, "source": "CUDA_VISIBLE_DEVICES=1"}
    assert probe.gpus(4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})["count"] == 4
    assert probe.gpus(1, {"CUDA_VISIBLE_DEVICES": ""})["count"] == 0
