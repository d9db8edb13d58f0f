"""The per-node task: start torchrun for this node and turn signals into a stop request.

Imported by the launcher's submitit pickle on every node, so it stays stdlib-only and cheap.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from hpc_grpo import rundir
from hpc_grpo.rundir import contract
from hpc_grpo.rundir.contract import CLEAN_END, STALLED, RunRecord
from hpc_grpo.rundir.state import RunState
from hpc_grpo.rundir.view import read_job_lines
from hpc_grpo.runtime.node import (
    causes,
    hub_push,
    oom,
    replace,
    retry,
    slurm_facts,
    vllm_server,
    watchdog,
)
from hpc_grpo.runtime.node.environment import child_env, library_env
from hpc_grpo.runtime.node.ports import free_port, with_master_port
from hpc_grpo.runtime.node.scratch import make_scratch
from hpc_grpo.runtime.shared import attempt_nodes, setup_failure, vllm_address
from hpc_grpo.runtime.shared.host_memory import usable_cpus

PAYLOAD_MODULES = {"train": "hpc_grpo.runtime.rank.train", "check": "hpc_grpo.runtime.rank.smoke"}


def handled_signals(run: RunRecord) -> tuple[signal.Signals, ...]:
    """USR2, TERM and whatever run.json's stop block adds (a site may requeue on USR1).

    The torchrun agent ignores these: the workers handle them; the agent would die of a user
    signal (exit 138) or SIGKILL the workers 30 s after forwarding SIGTERM, mid-checkpoint."""
    return tuple(signal.Signals["SIG" + name] for name in run.stop.every())


def torchrun_argv(run: RunRecord, env: Mapping[str, str]) -> list[str]:
    """The torchrun command for this node: static rendezvous, so global ranks follow node order."""
    payload = run.payload
    if payload not in PAYLOAD_MODULES:
        raise ValueError(f"unknown payload {payload!r}; expected one of {sorted(PAYLOAD_MODULES)}")
    nodes = run.nodes
    port = with_master_port(env, nodes, free_port)["MASTER_PORT"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(run.procs_per_node),
        "--node-rank",
        env.get("SLURM_NODEID") or "0",
        "--master-addr",
        env.get("MASTER_ADDR") or "127.0.0.1",
        "--master-port",
        port,
        "--max-restarts",
        "0",
        "-m",
        PAYLOAD_MODULES[payload],
        run.run_dir,
    ]


def attempt_id(env: Mapping[str, str]) -> str:
    """One id shared by all node tasks of one Slurm attempt (job id + restart count)."""
    job = env.get("SLURM_JOB_ID")
    if job:
        return f"slurm-{job}.{env.get('SLURM_RESTART_COUNT', '0')}"
    return f"local-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def seconds_left(env: Mapping[str, str], run: RunRecord, started_at: float,
                 now: float | None = None) -> float | None:
    """Time left before the job's limit: Slurm's end time where it exports one (23.02+), else
    the planned limit minus this attempt's age (the node task starts with the job)."""
    now = time.time() if now is None else now
    end = env.get("SLURM_JOB_END_TIME", "")
    if end.isdigit():
        return float(end) - now
    if run.time_min:
        return float(run.time_min) * 60 - (now - started_at)
    return None


def _first_node() -> bool:
    """This task is node 0's: the one that records, requeues and tells a server node."""
    return os.environ.get("SLURM_NODEID", "0") == "0"


def _agent_ignores(signals: tuple[signal.Signals, ...]) -> Callable[[], None]:
    def ignore() -> None:  # runs in the child before exec; SIG_IGN survives exec
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)  # the workers inherit it until they set handlers

    return ignore


def _server_ignores(signals: tuple[signal.Signals, ...]) -> Callable[[], None]:
    """`vllm serve` ignores the stop signals but TERM, which is how the node task ends it."""
    return _agent_ignores(tuple(sig for sig in signals if sig != signal.SIGTERM))


def exit_code(torchrun_rc: int, state: RunState, attempt: str) -> int:
    """0 when this attempt's rank 0 recorded a clean end; torchrun's own code otherwise."""
    if state.is_attempt(attempt) and state.phase in CLEAN_END:
        return 0
    return torchrun_rc


class RunFailed(RuntimeError):
    """The run ended failed and is not requeued. Raised, not returned: submitit reports any
    returned value as success, so Slurm recorded such a job COMPLETED 0:0 (issue #13)."""


class NodeTask:
    """Run this node's share of a run; picklable (holds only the run directory and a flag).

    Under submitit: a USR2/TERM first becomes a stop request for the ranks; once torchrun has
    exited (checkpoint saved), the handler submitit had installed runs with that signal, so
    its checkpoint-and-requeue happens after the save, never in the middle of it.
    """

    def __init__(self, run_dir: str, *, chain_signals: bool = True) -> None:
        self.run_dir = str(run_dir)
        self.chain_signals = chain_signals  # hand received signals on once torchrun has exited
        self._received: list[int] = []
        self._started_at = time.time()
        self._attempt = ""  # the attempt being run; its ranks keep this task's stop requests
        self._stalled = False  # this attempt was ended by the hang watchdog
        self._facts: causes.JobFacts | None = None  # Slurm's answer at the first stop signal

    def __repr__(self) -> str:
        return f"NodeTask({self.run_dir!r})"

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self._received.append(signum)
        rundir.request_stop(self.run_dir, f"{name} to node task on {socket.gethostname()}",
                            signal=name, attempt=self._attempt)
        print(f"[node] {name}: stop requested; waiting for torchrun", flush=True)
        if len(self._received) == 1 and _first_node():
            self._record_cause(name)

    def _record_cause(self, name: str) -> None:
        """Rank-0 node, first signal: ask Slurm now (a requeue or a preemption changes the job's
        record within seconds) and keep the cause in a file of its own, which the next attempt
        reads if this task is killed before torchrun exits (runtime/rank/train.py)."""
        try:
            cause = self._ask_slurm(name)
        except Exception as err:  # noqa: BLE001 - in a signal handler: never break the stop
            print(f"[node] {name}: cause not told ({type(err).__name__}: {err})", flush=True)
            return
        print(f"[node] {name}: cause {cause}", flush=True)

    def _ask_slurm(self, name: str) -> str:
        self._facts = slurm_facts.job(os.environ)
        run = rundir.load_run(self.run_dir)
        left = seconds_left(os.environ, run, self._started_at)
        cause = causes.stop_cause([name], self._facts, float(run.signal_lead_s), left,
                                  slurm=bool(os.environ.get("SLURM_JOB_ID")))
        rundir.write_json_atomic(Path(self.run_dir) / contract.STOP_CAUSE_JSON, {
            "attempt": attempt_id(os.environ), "cause": cause, "signal": name, "time": time.time(),
            "facts": dataclasses.asdict(self._facts) if self._facts else None})
        return cause

    def __call__(self) -> int:
        # min_nodes: the record at the count Slurm granted this attempt (reshard.record_at)
        run = attempt_nodes.for_node_task(rundir.load_run(self.run_dir),
                                          os.environ).with_run_dir(self.run_dir)
        node_env = with_master_port(os.environ, run.nodes, free_port)
        attempt = attempt_id(node_env)
        serves_only = vllm_server.serves_only(run, node_env)  # a server node of its own
        argv = [] if serves_only else torchrun_argv(run, node_env)
        (Path(self.run_dir) / contract.LOGS).mkdir(parents=True, exist_ok=True)
        print(f"[node] {socket.gethostname()} attempt {attempt}: "
              f"{'vllm serve only, no trainer' if serves_only else ' '.join(argv)}", flush=True)
        self._received = []
        self._attempt = attempt
        self._facts = None
        self._started_at = time.time()
        self._stalled = False
        on_main = threading.current_thread() is threading.main_thread()
        signals = handled_signals(run)
        previous = {s: signal.getsignal(s) for s in signals} if on_main else {}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        started = time.time()
        server = None
        scratch = None
        rc: int | None = None  # torchrun's exit code (a dedicated server node: the server's end)
        try:
            libraries = library_env(node_env, attempt, run)  # the ranks' and a server's, once
            env = child_env(node_env, attempt, run, usable_cpus(), libraries)
            env[attempt_nodes.ATTEMPT_NODES] = str(run.nodes)  # the ranks apply the same rule
            if "PYTHONPYCACHEPREFIX" in libraries:  # bytecode.ranks_env chose the shared cache
                print(f"[node] bytecode cache {env['PYTHONPYCACHEPREFIX']}: the packages carry "
                      "none, the ranks compile them once there (runtime/node/bytecode.py)",
                      flush=True)
            if run.run_dir:  # the attempt's temporaries (scratch_env), removed below
                scratch = make_scratch(run, attempt, node_env)
            if vllm_address.server_mode(run) and vllm_server.is_server_node(run, node_env):
                log = str(Path(self.run_dir) / contract.LOGS / contract.VLLM_SERVER_LOG)
                server = vllm_server.start(run, {**node_env, **libraries},
                                           log, _server_ignores(signals))
                port = vllm_address.address(node_env).port
                print(f"[node] vllm serve starting on port {port} (log {log})", flush=True)
                if not serves_only:  # a server node of its own watches it below instead
                    vllm_server.wait_healthy(server, port)
            if serves_only:
                assert server is not None
                rc = vllm_server.serve_until_trainers_end(server, self.run_dir, attempt,
                                                          run.watchdog.startup_s)
            else:
                rc = self._run_torchrun(run, argv, env, signals, attempt)
        finally:
            if vllm_server.dedicated(run) and _first_node():
                vllm_server.trainers_ended(self.run_dir, attempt, rc)
            if server is not None:  # before its scratch (vLLM's sockets) goes
                vllm_server.stop(server)
            if scratch is not None:  # nothing of the attempt's outlives it
                shutil.rmtree(scratch, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        state = rundir.load_state(self.run_dir)
        code = exit_code(rc, state, attempt)
        failed = ""
        if _first_node():
            failed = self._after_exit(run, code, state, attempt)
            hub_push.at_end(run, state, attempt,  # push_to_hub where the nodes reach the hub
                            left=seconds_left(os.environ, run, self._started_at))
        print(f"[node] {'vllm serve' if serves_only else 'torchrun'} ended {rc} after "
              f"{time.time() - started:.1f} s; node task returns {code}", flush=True)
        finished = state.is_attempt(attempt) and state.phase == "done"
        if self.chain_signals and not finished:  # a signal after the last step: nothing to requeue
            for signum in dict.fromkeys(self._received):  # each signal once, in arrival order
                handler = previous.get(signal.Signals(signum))
                if callable(handler):
                    handler(signum, None)  # submitit's may requeue and exit here
        if failed:
            raise RunFailed(failed)
        return code

    def _run_torchrun(self, run: RunRecord, argv: list[str], env: dict[str, str],
                      signals: tuple[signal.Signals, ...], attempt: str) -> int:
        """This node's torchrun to its end, under the hang watchdog; its exit code."""
        kills_before, kills_file = oom.read_kills()
        proc = subprocess.Popen(argv, env=env, preexec_fn=_agent_ignores(signals))
        dog = watchdog.start_for(run, self.run_dir, attempt, self._started_at, proc,
                                 records=_first_node())
        rc = proc.wait()  # signal handlers run while waiting (PEP 475 restarts the wait)
        if dog is not None:
            dog.stop()
            self._stalled = dog.fired is not None
        if rc != 0 and not self._stalled:  # an OOM-killed rank leaves no record of its own
            self._record_oom(oom.killed_line(kills_before, oom.read_kills()[0], kills_file,
                                             socket.gethostname()))
        return rc

    def _record_oom(self, line: str) -> None:
        if line:
            print(f"[node] {oom.CAUSE}: {line}", flush=True)
            rundir.update_state(self.run_dir, phase="failed", stop_cause=oom.CAUSE, message=line)

    def _after_exit(self, run: RunRecord, code: int, state: RunState,
                    attempt: str) -> str:
        """Rank-0 node: name the cause of a signalled stop; requeue a crash while retries last.
        Returns why the run ended failed under Slurm, "" when it did not (or was requeued)."""
        names = [signal.Signals(s).name for s in dict.fromkeys(self._received)]
        if names and state.phase == "interrupted":
            left = seconds_left(os.environ, run, self._started_at)
            cause = causes.stop_cause(names, self._facts, float(run.signal_lead_s), left,
                                      slurm=bool(os.environ.get("SLURM_JOB_ID")))
            rundir.update_state(self.run_dir, stop_cause=cause)
            return ""
        job = os.environ.get("SLURM_JOB_ID")
        if code == 0 or names or not job or state.phase == "done":
            return ""
        path = Path(self.run_dir) / contract.RETRIES_JSONL
        # This job's retries: `hpc-grpo resume` (a new job, after the user saw it fail) starts a
        # fresh count, as Slurm counts requeues per job; lines without a job id count as ours,
        # and so do the jobs this one was resubmitted from without a dead node (replace.py).
        chain = replace.job_chain(read_job_lines(Path(self.run_dir) / contract.JOBS_JSONL, []),
                                  job)
        earlier = [e for e in rundir.read_jsonl(path) if str(e.get("job_id", job)) in chain]
        step = state.last_checkpoint_step or 0
        stalled = self._stalled or (state.is_attempt(attempt) and state.stop_cause == STALLED)
        setup = setup_failure.records(Path(self.run_dir), attempt)  # what the ranks raised
        config_error = "" if stalled else retry.configuration_error(state, attempt, setup,
                                                                    run.world_size)  # never
        recorded = state.stop_cause or ""  # an OOM kill is this node task's record
        recorded = recorded if state.is_attempt(attempt) or recorded == oom.CAUSE else ""
        silent: list[str] = []  # nodes whose slurmd is gone: the next job goes without them
        if config_error:
            cause = contract.CONFIGURATION_ERROR
        elif stalled:  # the watchdog ended the attempt: no crash of Slurm's to look up
            cause = STALLED
        elif recorded in retry.RESOURCE_CAUSES:  # out of memory, disk full: recorded on the node
            cause = recorded
        else:
            nodes = slurm_facts.node_records(os.environ)
            silent = slurm_facts.silent_nodes(nodes, slurm_facts.slurmd_port()) if nodes else []
            if silent:
                print(f"[node] slurmd does not answer on {', '.join(silent)}", flush=True)
            cause = causes.crash_cause(slurm_facts.job(os.environ), slurm_facts.node_states(nodes),
                                       silent)
        decision = retry.decide_retry(earlier, step, run.max_requeues, config_error, cause)
        print(f"[node] training failed (exit {code}, {cause}): {decision.reason}", flush=True)
        if not decision.requeue:
            rundir.update_state(self.run_dir, phase="failed", stop_cause=cause,  # a resume's cause
                                message=config_error or decision.reason)  # status shows it
            return decision.reason
        rundir.append_jsonl(path, {"time": time.time(), "checkpoint_step": step, "exit_code": code,
                                   "job_id": job, "cause": cause})
        rundir.update_state(self.run_dir, stop_cause=cause)
        if silent:  # Slurm would hold a requeue until SlurmdTimeout: a new job without them
            replaced = replace.replace(Path(self.run_dir), job, silent, os.environ)
            if replaced.job_id:
                print(f"[node] job {replaced.job_id} carries on without {', '.join(silent)}"
                      f"{'; ' + replaced.problem if replaced.problem else ''}", flush=True)
            else:
                print(f"[node] no new job without {', '.join(silent)} ({replaced.problem})"
                      f"{': requeued instead' if replaced.requeue else ''}", flush=True)
            if not replaced.requeue:
                return ""
        problem = slurm_facts.requeue(job)
        if problem:  # the run then ends with this attempt: say why in the node log and state
            print(f"[node] requeue failed: {problem}", flush=True)
            rundir.update_state(self.run_dir, phase="failed", message=f"requeue failed: {problem}")
            return f"requeue failed: {problem}"
        return ""

    def checkpoint(self) -> Any:
        """submitit's requeue hook (its USR2 handler calls it on the rank-0 node task): resubmit
        this same task, which resumes from the newest complete checkpoint; None once done.

        submitit is found in sys.modules, never imported: it is loaded whenever this is called.
        """
        if rundir.load_state(self.run_dir).phase == "done":
            return None
        utils = sys.modules.get("submitit.core.utils")
        if utils is None:
            return None
        return utils.DelayedSubmission(NodeTask(self.run_dir, chain_signals=self.chain_signals))


def main(argv: list[str] | None = None) -> int:
    """`python -m hpc_grpo.runtime.node RUN_DIR`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hpc_grpo.runtime.node RUN_DIR", file=sys.stderr)
        return 2
    return NodeTask(args[0])()


if __name__ == "__main__":
    sys.exit(main())
