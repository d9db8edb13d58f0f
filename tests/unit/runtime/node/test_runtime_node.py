"""The node task's pure parts: torchrun argv, child environment, exit code."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.state import RunState
from hpc_grpo.runtime.node import vllm_server
from hpc_grpo.runtime.node.environment import child_env, trainer_visible_devices
from hpc_grpo.runtime.node.task import (
    NodeTask,
    attempt_id,
    exit_code,
    handled_signals,
    torchrun_argv,
)
from hpc_grpo.runtime.shared import vllm_address
from tests.paths import REPO


def rec(data: dict[str, Any]) -> RunRecord:
    """A run record from the fields a test cares about (the rest: the contract's defaults)."""
    return RunRecord.from_dict({"schema": 1, "run_id": "r1", "run_dir": "/runs/r1", "model": "m",
                                "dataset": {"name": "d"}, "nodes": 1, "procs_per_node": 1, **data})


def run(nodes: int = 2, ppn: int = 4, payload: str = "train") -> RunRecord:
    return rec({"nodes": nodes, "procs_per_node": ppn, "payload": payload, "run_dir": "/runs/r1"})


def test_torchrun_argv_from_slurm_env() -> None:
    env = {"SLURM_NODEID": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29611"}
    argv = torchrun_argv(run(), env)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    flags = dict(zip(argv[3:13:2], argv[4:14:2], strict=True))
    assert flags == {
        "--nnodes": "2",
        "--nproc-per-node": "4",
        "--node-rank": "1",
        "--master-addr": "node1",
        "--master-port": "29611",
    }
    assert argv[-3:] == ["-m", "hpc_grpo.runtime.rank.train", "/runs/r1"]


def test_torchrun_argv_defaults_single_node() -> None:
    argv = torchrun_argv(run(nodes=1, payload="check"), {})
    assert argv[argv.index("--node-rank") + 1] == "0"
    assert argv[argv.index("--master-addr") + 1] == "127.0.0.1"
    assert 0 < int(argv[argv.index("--master-port") + 1]) < 65536
    assert argv[-2] == "hpc_grpo.runtime.rank.smoke"


def test_torchrun_argv_errors() -> None:
    with pytest.raises(ValueError, match="MASTER_PORT"):
        torchrun_argv(run(nodes=2), {"MASTER_ADDR": "node1"})
    with pytest.raises(ValueError, match="unknown payload"):
        torchrun_argv(run(payload="eval"), {"MASTER_PORT": "1"})


def test_server_torchrun_and_ranks_agree_on_ports_without_slurm() -> None:
    """Found on the GPU machine: the node task picked a port for torchrun but started the
    server on a default one, so the trainer waited 240 s on a port nobody served."""
    from hpc_grpo.runtime.node.task import free_port, with_master_port

    node_env = with_master_port({}, 1, lambda: 40100)
    argv = torchrun_argv(run(nodes=1), node_env)
    assert argv[argv.index("--master-port") + 1] == "40100"
    rank_env = child_env(node_env, "a", run(nodes=1)) | {"MASTER_PORT": "40100"}  # torchrun's
    assert vllm_address.address(node_env) == vllm_address.address(rank_env)
    assert vllm_address.grpo_server_fields(rank_env)["vllm_server_port"] == 40101
    assert with_master_port({"MASTER_PORT": "29611"}, 2, lambda: 1)["MASTER_PORT"] == "29611"
    with pytest.raises(ValueError, match="MASTER_PORT"):
        with_master_port({}, 2, free_port)
    with pytest.raises(ValueError, match="MASTER_PORT"):
        vllm_address.address({})
    port = free_port()
    assert 1024 <= port <= 65533


def test_child_env() -> None:
    env = child_env({"PATH": "/bin", "OMP_NUM_THREADS": "4"}, "a1", rec({}))
    assert env["OMP_NUM_THREADS"] == "4"
    assert child_env({}, "a1", rec({}))["OMP_NUM_THREADS"] == "1"
    assert env["HPC_GRPO_ATTEMPT"] == "a1"
    assert "SIGTERM" not in env["TORCHELASTIC_SIGNALS_TO_HANDLE"]


def test_compile_caches_are_shared_by_the_runs_of_one_output_root() -> None:
    a = child_env({}, "a", rec({"run_dir": "/out/runs/a-0001"}))
    b = child_env({}, "a", rec({"run_dir": "/out/runs/b-0001"}))
    assert a["VLLM_CACHE_ROOT"] == b["VLLM_CACHE_ROOT"] == "/out/runs/.compile-cache/vllm"
    assert a["TORCHINDUCTOR_CACHE_DIR"].startswith("/out/runs/.compile-cache/")
    mine = child_env({"VLLM_CACHE_ROOT": "/mine"}, "a", rec({"run_dir": "/out/runs/a"}))
    assert mine["VLLM_CACHE_ROOT"] == "/mine"


def test_ranks_share_the_node_cpus_they_may_use() -> None:
    run = {"procs_per_node": 4}
    assert child_env({}, "a", rec(run), cpus=16)["OMP_NUM_THREADS"] == "4"
    assert child_env({"SLURM_CPUS_ON_NODE": "8"}, "a", rec(run), cpus=16)["OMP_NUM_THREADS"] == "2"
    assert child_env({"SLURM_CPUS_ON_NODE": "64"}, "a", rec(run), cpus=16)["OMP_NUM_THREADS"] == "4"
    assert child_env({}, "a", rec(run), cpus=2)["OMP_NUM_THREADS"] == "1"  # never zero
    assert child_env({}, "a", rec({"procs_per_node": 1}), cpus=16)["OMP_NUM_THREADS"] == "16"


def test_gpu_ranks_get_one_thread_unless_adam_runs_on_the_host() -> None:
    gpu = {"procs_per_node": 2, "device": "cuda"}
    assert child_env({}, "a", rec(gpu), cpus=32)["OMP_NUM_THREADS"] == "1"
    assert child_env({}, "a", rec({**gpu, "deepspeed": {"zero_stage": 3}}), cpus=32)["OMP_NUM_THREADS"] == "1"
    offload = {**gpu, "deepspeed": {"zero_stage": 3, "offload_optimizer": True}}
    assert child_env({}, "a", rec(offload), cpus=32)["OMP_NUM_THREADS"] == "16"  # CPU Adam's threads
    assert child_env({}, "a", rec({**gpu, "device": "cpu"}), cpus=32)["OMP_NUM_THREADS"] == "16"
    assert child_env({"OMP_NUM_THREADS": "6"}, "a", rec(gpu), cpus=32)["OMP_NUM_THREADS"] == "6"  # yours


def test_attempt_id_shared_by_node_tasks_of_one_job() -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "2"}
    assert attempt_id(env) == attempt_id(dict(env)) == "slurm-77.2"
    assert attempt_id({}).startswith("local-")


def test_exit_code_trusts_state_of_this_attempt_only() -> None:
    def state(**fields: str) -> RunState:
        return RunState.from_dict(fields)

    assert exit_code(138, state(phase="interrupted", attempt="a"), "a") == 0
    assert exit_code(138, state(phase="done", attempt="a"), "a") == 0
    assert exit_code(138, state(phase="done", attempt="old"), "a") == 138
    assert exit_code(1, state(phase="failed", attempt="a"), "a") == 1
    assert exit_code(0, state(), "a") == 0


def test_node_task_pickles() -> None:
    task = pickle.loads(pickle.dumps(NodeTask("/runs/r1")))
    assert task.run_dir == "/runs/r1"


class FakeTorchrun:
    """Stands in for torchrun: while 'running', the node task itself gets SIGUSR2."""

    def __init__(self, argv: list[str], env: dict[str, str], preexec_fn: Any) -> None:
        self.argv, self.env = argv, env

    def wait(self) -> int:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGUSR2)
        return 138  # what torchrun may return after a user signal


def usr2_during_torchrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str,
                         phase: str) -> tuple[int, list[int], Path]:
    """Run a node task whose torchrun stand-in gets SIGUSR2, rank 0 having left ``phase`` for
    Slurm attempt ``job``.0; returns its code, the signals the earlier handler saw, the run dir."""
    import json
    import signal

    from hpc_grpo import rundir
    from hpc_grpo.runtime.node import task as node

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(run(nodes=1).to_dict()))
    monkeypatch.setattr(node.subprocess, "Popen", FakeTorchrun)
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    rundir.update_state(run_dir, phase=phase, attempt=f"slurm-{job}.0", step=3)
    seen: list[int] = []
    old = signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))
    try:
        code = node.NodeTask(str(run_dir))()  # chain_signals is on by default
        assert signal.getsignal(signal.SIGUSR2) is not None
    finally:
        signal.signal(signal.SIGUSR2, old)
    return code, seen, run_dir


def test_node_task_turns_signal_into_stop_request_and_chains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    # What the ranks' rank 0 would have written for this attempt after a clean stop.
    code, seen, run_dir = usr2_during_torchrun(tmp_path, monkeypatch, "5", "interrupted")
    assert seen == [signal.SIGUSR2]
    assert code == 0  # torchrun's 138 is not read alone: state says interrupted
    assert "SIGUSR2 to node task" in (run_dir / "stop-request").read_text()


def test_a_signal_after_the_last_step_is_not_handed_to_submitit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on the sandbox: training ended, the time-limit USR2 came before torchrun exited;
    submitit's handler found nothing to requeue (checkpoint() is None once done) and raised, so
    a finished run ended FAILED."""
    code, seen, _ = usr2_during_torchrun(tmp_path, monkeypatch, "6", "done")
    assert code == 0
    assert seen == []


def test_checkpoint_resubmits_through_loaded_submitit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    from hpc_grpo import rundir
    task = NodeTask(str(tmp_path))
    monkeypatch.delitem(sys.modules, "submitit.core.utils", raising=False)
    assert task.checkpoint() is None  # outside submitit: nothing to resubmit with

    class Delayed:
        def __init__(self, function: Any) -> None:
            self.function = function

    monkeypatch.setitem(sys.modules, "submitit.core.utils", types.SimpleNamespace(DelayedSubmission=Delayed))
    rundir.update_state(tmp_path, phase="interrupted")
    again = task.checkpoint()
    assert isinstance(again, Delayed) and again.function.run_dir == str(tmp_path)
    rundir.update_state(tmp_path, phase="done")
    assert task.checkpoint() is None  # a finished run is not requeued


def test_server_mode_hides_server_gpus_from_trainers() -> None:
    server = {"node": 1, "gpus": [0], "trainer_gpus": [1, 2, 3]}
    cuda = {"device": "cuda", "vllm": {"enabled": True, "mode": "server", "server": server}}
    assert trainer_visible_devices(rec(cuda), {}) == "1,2,3"
    assert trainer_visible_devices(rec(cuda), {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == "5,6,7"
    assert child_env({}, "a", rec(cuda))["CUDA_VISIBLE_DEVICES"] == "1,2,3"
    colocate = {"device": "cuda", "vllm": {"enabled": True, "mode": "colocate", "server": None}}
    assert trainer_visible_devices(rec(colocate), {}) is None
    assert "CUDA_VISIBLE_DEVICES" not in child_env({}, "a", rec(colocate))
    with pytest.raises(ValueError, match="trainer GPUs"):
        trainer_visible_devices(rec(cuda), {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_stop_signals_include_the_sites_requeue_signal() -> None:
    import signal

    assert handled_signals(rec({})) == (signal.SIGUSR2, signal.SIGTERM)
    assert handled_signals(rec({"stop": {"signals": ["USR1", "TERM"]}})) == (
        signal.SIGUSR2,
        signal.SIGTERM,
        signal.SIGUSR1,
    )


# The requeue decision (pure): bounded retries after crashes (causes: test_causes.py).
from hpc_grpo.runtime.node import retry  # noqa: E402


def test_retries_are_bounded() -> None:
    earlier = [{"checkpoint_step": s} for s in (5, 10, 15)]
    assert retry.decide_retry(earlier[:2], 15, 3).requeue
    no = retry.decide_retry(earlier, 20, 3)
    assert not no.requeue and "spent" in no.reason


def test_no_progress_stops_retrying() -> None:
    earlier = [{"checkpoint_step": 10}, {"checkpoint_step": 10}]
    decision = retry.decide_retry(earlier, 10, 9)
    assert not decision.requeue and "deterministic" in decision.reason
    assert retry.decide_retry(earlier[:1], 10, 9).requeue


def test_seconds_left_prefers_slurm_end_time() -> None:
    from hpc_grpo.runtime.node.task import seconds_left

    assert seconds_left({"SLURM_JOB_END_TIME": "1000"}, rec({"time_min": 2}), 0.0, now=970.0) == 30.0
    assert seconds_left({}, rec({"time_min": 2}), 100.0, now=190.0) == 30.0
    assert seconds_left({}, rec({}), 100.0, now=190.0) is None


FAKE_SERVER = """
import http.server, json, os, sys
if len(sys.argv) > 2:  # where to write the environment it was started with
    with open(sys.argv[2], "w") as out:
        json.dump({k: os.environ.get(k) for k in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TMPDIR")}, out)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""
FAKE_RANK = """
import json, os, sys, urllib.request
from hpc_grpo import rundir
from hpc_grpo.runtime.shared import vllm_address
fields = vllm_address.grpo_server_fields(os.environ)  # what train.py gives GRPOConfig
url = f"http://{fields['vllm_server_host']}:{fields['vllm_server_port']}/health"
status = urllib.request.urlopen(url, timeout=5).status
open(os.path.join(sys.argv[1], "rank-saw"), "w").write(json.dumps([fields["vllm_server_port"], status]))
rundir.update_state(sys.argv[1], phase="done", attempt=os.environ["HPC_GRPO_ATTEMPT"])
"""


def test_node_task_ranks_reach_the_server_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server mode without Slurm, end to end through the node task: the server it starts and
    waits for is the one the ranks' GRPOConfig points at (GPUs aside, vllm serve replaced)."""
    import json

    from hpc_grpo.runtime.node import task as node
    from hpc_grpo.runtime.node import vllm_server

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {**run(nodes=1, ppn=1).to_dict(), "run_dir": str(run_dir), "device": "cuda",
              "model": "m", "vllm": {"enabled": True, "mode": "server",
                                     "server": {"node": 0, "gpus": [0], "trainer_gpus": [1]}}}
    (run_dir / "run.json").write_text(json.dumps(record))
    for name in ("MASTER_PORT", "SLURM_JOB_ID", "SLURM_NODEID", vllm_address.HOST_ENV):
        monkeypatch.delenv(name, raising=False)
    started: list[int] = []

    def fake_server_argv(_run: Any, port: int) -> list[str]:
        started.append(port)
        return [sys.executable, "-c", FAKE_SERVER, str(port), str(run_dir / "server-env")]

    monkeypatch.setattr(vllm_server, "server_argv", fake_server_argv)
    real = node.torchrun_argv

    def fake_torchrun(run_: Any, env: Any) -> list[str]:  # sets the ranks' MASTER_PORT as torchrun
        argv = real(run_, env)
        port = argv[argv.index("--master-port") + 1]
        return ["env", f"MASTER_PORT={port}", sys.executable, "-c", FAKE_RANK, str(run_dir)]

    monkeypatch.setattr(node, "torchrun_argv", fake_torchrun)
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"):
        monkeypatch.delenv(name, raising=False)
    from hpc_grpo.runtime.node import environment

    computed: list[str] = []  # library_env reads every installed RECORD for the bytecode key

    def counted(env: Any, attempt: str, run_: Any) -> dict[str, str]:
        computed.append(attempt)
        return real_library_env(env, attempt, run_)

    real_library_env = environment.library_env
    monkeypatch.setattr(environment, "library_env", counted)
    monkeypatch.setattr(node, "library_env", counted)
    assert node.NodeTask(str(run_dir))() == 0
    assert len(computed) == 1, computed  # the ranks' and the server's, once an attempt
    port, status = json.loads((run_dir / "rank-saw").read_text())
    assert (port, status) == (started[0], 200)
    # the server's libraries write where the ranks' do (issue #27), not under ~/.cache or /tmp
    seen = json.loads((run_dir / "server-env").read_text())
    assert seen["VLLM_CACHE_ROOT"] == str(tmp_path / ".compile-cache" / "vllm")
    assert seen["TRITON_CACHE_DIR"] == str(tmp_path / ".compile-cache" / "triton")
    # the attempt's scratch (scratch.py: in the run directory, or named after it where a socket
    # path under it would be too long, as here), removed once the server has stopped
    scratch = Path(seen["TMPDIR"])
    assert scratch.parent == run_dir / "tmp" or scratch.name.startswith("hpc-grpo-run-"), scratch
    assert not scratch.exists()



def test_torchs_allocator_is_left_to_the_user() -> None:
    """Expandable segments on server mode's trainer did not stop its reserve from growing
    (2 x H200, 1.5B: +2.1 GiB a step against +3.1) and the default allocator's reserve levels
    off by itself (74.8 GiB from step 16 of 45): no rank gets a PYTORCH_CUDA_ALLOC_CONF it did
    not have (docs/benchmarks.md, 2026-11-26); a user's own is passed on."""
    server = {"node": 0, "gpus": [0], "trainer_gpus": [1]}
    cuda = rec({"device": "cuda", "vllm": {"enabled": True, "mode": "server", "server": server}})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in child_env({}, "a", cuda)
    assert child_env({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "a", cuda)[
        "PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


NODE_DRIVER = """
import json, sys
from hpc_grpo.runtime.node import task as node
from hpc_grpo.runtime.node import vllm_server
run_dir, server_script, rank_script = sys.argv[1:4]
vllm_server.server_argv = lambda _run, port: [sys.executable, "-c", server_script, str(port)]
real = node.torchrun_argv
def torchrun(run_, env):  # the ranks' MASTER_PORT as torchrun would set it; who asked, kept
    argv = real(run_, env)
    with open(run_dir + "/torchrun-on-node-" + env["SLURM_NODEID"], "w") as out:
        json.dump(argv, out)
    port = argv[argv.index("--master-port") + 1]
    return ["env", f"MASTER_PORT={port}", sys.executable, "-c", rank_script, run_dir]
node.torchrun_argv = torchrun
sys.exit(node.NodeTask(run_dir, chain_signals=False)())
"""
WAITING_RANK = FAKE_RANK.replace(
    "status = urllib.request.urlopen(url, timeout=5).status",
    "import time\nfor _ in range(100):\n    try:\n        status = urllib.request.urlopen(url, "
    "timeout=5).status\n        break\n    except OSError:\n        time.sleep(0.2)")


def test_a_server_node_of_its_own_serves_until_the_trainers_end(tmp_path: Path) -> None:
    """Two node tasks of one Slurm attempt as separate processes (GPUs aside, vllm serve and the
    ranks replaced): node 1 of a 2-node job with one GPU a node runs the server and no
    torchrun; node 0 trains (run.json's nodes: 1) against that server at the job's host and
    port, then tells node 1, whose task stops the server and ends cleanly."""
    import json
    import os
    import subprocess
    from dataclasses import replace

    from hpc_grpo.config.site import find_site
    from hpc_grpo.config.spec import build_spec
    from hpc_grpo.planner.job import build_plan
    from hpc_grpo.planner.types import ModelRef

    site = replace(find_site("sandbox-gpu"), name="onegpu", partition="gpu-a")
    spec = build_spec({"model_name_or_path": "m", "nodes": 2, "vllm_mode": "server"}, {}, {}, site)
    plan = build_plan(site, spec, ModelRef("m", local=False, arch=None))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = plan.run_record("r1", str(run_dir)).to_dict()
    (run_dir / "run.json").write_text(json.dumps(record))
    assert record["nodes"] == 1 and record["vllm"]["server"]["node"] == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(SLURM_JOB_ID="77", SLURM_RESTART_COUNT="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port_pair()), HPC_GRPO_VLLM_SERVER_HOST="127.0.0.1",
               PYTHONPATH=str(REPO))
    tasks = [subprocess.Popen([sys.executable, "-c", NODE_DRIVER, str(run_dir), FAKE_SERVER,
                               WAITING_RANK], env={**env, "SLURM_NODEID": str(node)})
             for node in (1, 0)]
    assert [task.wait(timeout=120) for task in tasks] == [0, 0]
    assert not (run_dir / "torchrun-on-node-1").exists()  # the server node trains nothing
    argv = json.loads((run_dir / "torchrun-on-node-0").read_text())
    assert argv[argv.index("--nnodes") + 1] == "1"
    port, status = json.loads((run_dir / "rank-saw").read_text())
    assert (port, status) == (int(env["MASTER_PORT"]) + 1, 200)
    ended = json.loads((run_dir / "trainers-ended.json").read_text())
    assert ended["attempt"] == "slurm-77.0" and ended["rc"] == 0


def free_port_pair() -> int:
    """A free port whose next one is free too (the server's is rendezvous + 1)."""
    import socket

    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


def test_the_server_node_gives_up_when_its_server_dies(tmp_path: Path) -> None:
    """No trainers-ended for this attempt (only an older one's) and the server gone: 1, at once."""
    import json
    import subprocess

    from hpc_grpo.runtime.node import vllm_server

    (tmp_path / "trainers-ended.json").write_text(json.dumps({"attempt": "slurm-1.0", "rc": 0}))
    server = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert vllm_server.serve_until_trainers_end(server, str(tmp_path), "slurm-1.1", 600) == 1


def _sleeping_server() -> Any:
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_the_server_node_stops_on_rank_0_s_final_state_without_the_file(tmp_path: Path) -> None:
    """Node 0 could not write trainers-ended.json (a full disk): rank 0's own record of the
    attempt's end still lets the server node go, rather than hold the allocation."""
    from hpc_grpo import rundir
    from hpc_grpo.runtime.node import vllm_server

    rundir.update_state(tmp_path, phase="training", attempt="slurm-5.0", step=2)
    rundir.update_state(tmp_path, phase="interrupted", attempt="slurm-5.1", step=3)
    server = _sleeping_server()
    try:
        assert vllm_server.serve_until_trainers_end(server, str(tmp_path), "slurm-5.1", 600) == 0
    finally:
        server.kill()
    assert vllm_server._attempt_over(str(tmp_path), "slurm-5.2") == ""  # the next attempt's not


def test_the_server_node_gives_up_when_no_rank_ever_starts(tmp_path: Path) -> None:
    from hpc_grpo import rundir
    from hpc_grpo.runtime.node import vllm_server

    rundir.update_state(tmp_path, phase="interrupted", attempt="slurm-5.0", step=3)  # an older one
    server = _sleeping_server()
    try:
        assert vllm_server.serve_until_trainers_end(server, str(tmp_path), "slurm-5.1", 0.5) == 1
        assert server.poll() is None  # the caller stops it (NodeTask's finally)
    finally:
        server.kill()


def test_node_0_s_notice_never_breaks_its_cleanup(tmp_path: Path) -> None:
    from hpc_grpo.runtime.node import vllm_server

    vllm_server.trainers_ended(str(tmp_path / "missing" / "dir"), "slurm-1.0", 0)  # no raise
    vllm_server.trainers_ended(str(tmp_path), "slurm-1.0", 0)
    assert (tmp_path / "trainers-ended.json").exists()


def test_the_server_outlives_the_stop_signal_slurm_sends_every_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scancel --signal=USR2` reaches `vllm serve` too; vLLM handles only INT and TERM, so a
    USR2 left at its default killed the server the trainers still needed for their last step."""
    import os
    import signal
    import time

    from hpc_grpo.runtime.node import task as node
    from hpc_grpo.runtime.node import vllm_server

    monkeypatch.setattr(vllm_server, "server_argv",
                        lambda _run, _port: [sys.executable, "-c", "import time; time.sleep(60)"])
    record = rec({"device": "cuda", "vllm": {"enabled": True, "mode": "server", "server": {
        "node": 1, "gpus": [0], "trainer_gpus": [0]}}})
    server = vllm_server.start(record, {"MASTER_PORT": "40100"}, str(tmp_path / "log"),
                               node._server_ignores(node.handled_signals(record)))
    try:
        time.sleep(0.5)
        os.kill(server.pid, signal.SIGUSR2)
        time.sleep(0.5)
        assert server.poll() is None
        started = time.monotonic()
        vllm_server.stop(server)  # TERM still ends it, without stop()'s 30 s wait and kill
        assert server.returncode == -signal.SIGTERM and time.monotonic() - started < 10
    finally:
        server.kill()
        server.wait()


def test_trainers_wait_for_the_server_as_long_as_the_node_task_does() -> None:
    """On a node of its own the server starts beside the trainers, not before them: TRL's 240 s
    default is shorter than a cold start; a recipe's own vllm_server_timeout is kept."""

    env = {"MASTER_PORT": "40100"}
    assert vllm_address.grpo_server_fields(env)["vllm_server_timeout"] == vllm_address.START_TIMEOUT_S
    assert vllm_address.START_TIMEOUT_S > 240
    assert vllm_address.grpo_server_fields(env, 900.0)["vllm_server_timeout"] == 900.0


def test_trainers_give_the_server_the_address_it_reaches_them_at() -> None:
    """TRL sends the server vLLM's get_ip() as the weight-transfer master address; where that
    guess fails the server dials 0.0.0.0 (itself). The trainers get the route's own address."""
    server = {"node": 1, "gpus": [0], "trainer_gpus": [0]}
    cuda = rec({"device": "cuda", "nodes": 1,
                "vllm": {"enabled": True, "mode": "server", "server": server}})
    env = {"MASTER_PORT": "40100", "HPC_GRPO_VLLM_SERVER_HOST": "127.0.0.1"}
    asked: list[tuple[str, int]] = []

    def towards(host: str, port: int) -> str:
        asked.append((host, port))
        return "10.9.0.1"

    assert vllm_server.trainer_host_env(cuda, env, towards) == {"VLLM_HOST_IP": "10.9.0.1"}
    assert asked == [("127.0.0.1", 40101)]  # the server's own host and port
    assert child_env(env, "a", cuda)["VLLM_HOST_IP"] == "127.0.0.1"  # the real route, loopback
    mine = {**env, "VLLM_HOST_IP": "10.1.1.1"}
    assert vllm_server.trainer_host_env(cuda, mine, towards, own=lambda ip: True) == {}  # kept
    # one from the login shell names another host: replaced by this node's own
    assert vllm_server.trainer_host_env(cuda, mine, towards, own=lambda ip: False) == {
        "VLLM_HOST_IP": "10.9.0.1"}
    assert vllm_server.is_own_address("127.0.0.1") and not vllm_server.is_own_address("192.0.2.1")
    assert vllm_server.trainer_host_env(cuda, env, lambda _h, _p: "") == {}  # no route: vLLM's own
    colocate = rec({"device": "cuda", "vllm": {"enabled": True, "mode": "colocate", "server": None}})
    assert "VLLM_HOST_IP" not in child_env(env, "a", colocate)


PROBE_WITHOUT_DEFAULT_ROUTE = """
import json, socket, sys
from hpc_grpo.runtime.node import vllm_server
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # vLLM get_ip()'s first guess
        s.connect(("8.8.8.8", 80))
        guess = s.getsockname()[0]
except OSError:
    guess = None
print(json.dumps([guess, vllm_server.address_towards("10.9.0.2", 8001)]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux's")
def test_a_node_without_a_default_route_still_names_its_address(tmp_path: Path) -> None:
    """The GPU sandbox's nodes (and air-gapped clusters) have no default route: vLLM's guess
    fails there, while the route to the server's network names this node's address."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("needs root, unshare and ip")
    setup = ("ip link add ha type veth peer name hb && ip addr add 10.9.0.1/24 dev ha && "
             "ip link set ha up && ip link set hb up && exec \"$0\" -c \"$1\"")
    proc = subprocess.run(["unshare", "-n", "sh", "-c", setup, sys.executable,
                           PROBE_WITHOUT_DEFAULT_ROUTE], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("no network namespaces here")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [None, "10.9.0.1"]


def test_a_cpu_plan_hides_the_machines_gpus_from_its_ranks() -> None:
    """#58: a profile of 0 GPUs on a GPU workstation plans CPU ranks; they see no card, whatever
    the node's CUDA_VISIBLE_DEVICES (torch, accelerate and vLLM would otherwise pick one up)."""
    cpu = {"device": "cpu", "vllm": {"enabled": False, "mode": "colocate", "server": None}}
    assert trainer_visible_devices(rec(cpu), {}) == ""
    assert child_env({"CUDA_VISIBLE_DEVICES": "0,1"}, "a", rec(cpu))["CUDA_VISIBLE_DEVICES"] == ""
