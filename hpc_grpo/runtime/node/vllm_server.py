"""Server mode: start ``vllm serve`` on the server node's reserved GPUs, wait until it answers.

TRL 1.16 talks to a plain ``vllm serve`` started with ``VLLM_SERVER_DEV_MODE=1`` and an NCCL
weight-transfer backend. Its address comes from the job (the last node of the allocation, a port
next to the rendezvous port), never from a hard-coded default, so two jobs on a node never meet.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from hpc_grpo.rundir import load_state, write_json_atomic
from hpc_grpo.rundir.contract import (
    CLEAN_END,
    TRAINERS_ENDED_JSON,
    RunRecord,
    ServerBlock,
)
from hpc_grpo.runtime.shared.staged import model_source
from hpc_grpo.runtime.shared.vllm_address import (
    HOST_ENV,
    START_TIMEOUT_S,
    address,
    server_mode,
)


def _server(run: RunRecord) -> ServerBlock:
    if run.vllm.server is None:
        raise ValueError("run.json has no vllm.server block: not a server-mode run")
    return run.vllm.server


def address_towards(host: str, port: int) -> str:
    """This node's address on the route to ``host`` ("" when there is none): a UDP connect
    sends nothing, it only picks the interface the kernel would use."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return ""


def is_own_address(ip: str) -> bool:
    """Whether ``ip`` belongs to this node: only an own address can be bound."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((ip, 0))
            return True
    except (OSError, ValueError):
        return False


def trainer_host_env(run: RunRecord, env: Mapping[str, str],
                     towards: Callable[[str, int], str] = address_towards,
                     own: Callable[[str], bool] = is_own_address) -> dict[str, str]:
    """Server mode: ``VLLM_HOST_IP`` for the trainers, the address at which the server reaches
    them. TRL hands the server vLLM's ``get_ip()`` as the weight-transfer group's master
    address, and vLLM guesses it from the default route (a UDP connect to 8.8.8.8), falling
    back to 0.0.0.0 on a node without one (the GPU sandbox's namespaces, air-gapped clusters):
    a server on another node then dials itself and the first weight push hangs. The interface
    that routes to the server is one the server can answer on, also on nodes of several
    networks. A VLLM_HOST_IP the site or user set is kept where it is this node's own: one
    exported from the login shell (sbatch passes the submitting environment on) names another
    host and is replaced."""
    if not server_mode(run):
        return {}
    if env.get("VLLM_HOST_IP") and own(env["VLLM_HOST_IP"]):
        return {}
    host = env.get(HOST_ENV, "127.0.0.1")
    port = address(env).port if env.get("MASTER_PORT", "").isdigit() else 9  # routing ignores it
    ip = towards(host, port)
    return {"VLLM_HOST_IP": ip} if ip else {}


def is_server_node(run: RunRecord, env: Mapping[str, str]) -> bool:
    return int(env.get("SLURM_NODEID", "0")) == _server(run).node


def dedicated(run: RunRecord) -> bool:
    """The server has a node of its own, which trains nothing: the allocation's last, one past
    the ``nodes`` that run torchrun (planner/topology.py server_split)."""
    return server_mode(run) and _server(run).node >= run.nodes


def serves_only(run: RunRecord, env: Mapping[str, str]) -> bool:
    """This node is a dedicated server node: `vllm serve` and no torchrun."""
    return dedicated(run) and is_server_node(run, env)


def server_argv(run: RunRecord, port: int) -> list[str]:
    """The server's share of its GPUs is the plan's (run.json vllm.gpu_memory_utilization)."""
    vllm = run.vllm
    gpus = _server(run).gpus
    launcher = ("import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; "
                "sys.exit(main())")  # `vllm serve` without relying on the console script's path
    source = model_source(run)  # a staged commit's folder, served under the hub id
    argv = [sys.executable, "-c", launcher, "serve", source,
            "--host", "0.0.0.0", "--port", str(port),
            "--tensor-parallel-size", str(len(gpus)),
            "--gpu-memory-utilization", str(vllm.gpu_memory_utilization),
            "--weight-transfer-config", json.dumps({"backend": "nccl"}),
            # log-probabilities after temperature and sampling filters, as the trainer computes
            # them: TRL's importance weights and the drift check (runs/drift.py) compare the two,
            # and TRL warns that the server's default biases them
            "--logprobs-mode", "processed_logprobs"]
    if vllm.max_model_length:
        argv += ["--max-model-len", str(vllm.max_model_length)]
    if source != run.model:
        argv += ["--served-model-name", run.model]
    return argv


def server_env(run: RunRecord, env: Mapping[str, str]) -> dict[str, str]:
    out = dict(env)
    gpus = _server(run).gpus
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    out["CUDA_VISIBLE_DEVICES"] = ",".join(visible[g] if visible else str(g) for g in gpus)
    out["VLLM_SERVER_DEV_MODE"] = "1"
    return out


def start(run: RunRecord, env: Mapping[str, str], log_path: str,
          preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """``preexec_fn``: the node task's, which ignores the stop signals but TERM (Slurm sends them
    to every process of the step): the server must outlive the trainers' last step, and vLLM
    handles only INT and TERM (a USR2 would kill it). TERM is how stop() ends it; one from
    Slurm ends it too (vLLM installs its own handler), a limit noted in docs/troubleshooting.md."""
    port = address(env).port
    log = open(log_path, "ab")  # noqa: SIM115 - the server outlives this function
    return subprocess.Popen(server_argv(run, port), env=server_env(run, env), stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=preexec_fn)


def wait_healthy(proc: subprocess.Popen[bytes], port: int,
                 timeout_s: float = START_TIMEOUT_S) -> None:
    """Block until /health answers 200; raise if the server dies or never comes up."""
    deadline = time.monotonic() + timeout_s
    url = f"http://127.0.0.1:{port}/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vllm serve did not answer on port {port} within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


TRAINERS_POLL_S = 2.0  # a dedicated server node's look at trainers-ended.json


def trainers_ended(run_dir: str, attempt: str, rc: int | None) -> None:
    """Node 0, its torchrun over: tell a dedicated server node that this attempt needs no
    server any more (whatever ended it). Never raises: a full disk must not cost node 0 the
    rest of its cleanup (the server node then stops on state.json or its own bound)."""
    try:
        write_json_atomic(Path(run_dir) / TRAINERS_ENDED_JSON,
                          {"attempt": attempt, "rc": rc, "time": time.time()})
    except OSError as err:
        print(f"[node] {TRAINERS_ENDED_JSON} not written ({err})", flush=True)


def _attempt_over(run_dir: str, attempt: str) -> str:
    """Why this attempt's trainers need no server any more; "" while they may."""
    try:
        if json.loads((Path(run_dir) / TRAINERS_ENDED_JSON).read_text()).get("attempt") == attempt:
            return "node 0's torchrun ended"
    except (OSError, ValueError):
        pass
    state = load_state(run_dir)
    if state.is_attempt(attempt) and state.phase in (*CLEAN_END, "failed"):
        return f"rank 0 recorded {state.phase}"
    return ""


def serve_until_trainers_end(server: subprocess.Popen[bytes], run_dir: str, attempt: str,
                             give_up_s: float) -> int:
    """A dedicated server node: keep `vllm serve` up until this attempt's trainers are over
    (a stop signal here changes nothing: they still need the server for the step in flight).
    0 then. 1 if the server died first (the trainers fail on their own, after TRL's server
    timeout, and node 0 decides the job's fate), or if no rank recorded this attempt within
    ``give_up_s`` (the watchdog's start-up allowance: node 0 never started its ranks), so that
    the server node never holds the allocation to the time limit on its own."""
    started = time.monotonic()
    while server.poll() is None:
        why = _attempt_over(run_dir, attempt)
        if why:
            print(f"[node] {why}: stopping vllm serve", flush=True)
            return 0
        if time.monotonic() - started > give_up_s and not load_state(run_dir).is_attempt(attempt):
            print(f"[node] no rank recorded attempt {attempt} in {give_up_s:.0f} s: stopping "
                  "vllm serve", flush=True)
            return 1
        time.sleep(TRAINERS_POLL_S)
    print(f"[node] vllm serve exited with {server.returncode} while the trainers ran", flush=True)
    return 1
