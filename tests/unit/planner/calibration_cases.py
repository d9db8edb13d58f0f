"""The step-time model's calibration cases: each saved GPU measurement of a layout with the
PlanRequest that rebuilds it, the listed misses and the counts a dated section of
docs/benchmarks.md states (moved out of test_speed_calibration.py, which holds the model to
them; the benchmark claims check reads them too)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from hpc_grpo.planner.catalogue import builtin_arch
from hpc_grpo.planner.memory.estimate import Layout
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.speed.predict import StepTime, predict, predict_server
from tests.paths import RESULTS

TOLERANCE = 0.20


H200, H100 = 139.0, 79.0


FACTS = "../shared/design/gpu-facts-2026-11-25.md"


SESSION_33 = "docs/benchmarks.md, 2026-11-26 (session 33), 7B layouts table"


def _json(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def _steps_after_first(name: str, key: str = "steps") -> float:
    return mean(step["step_time"] for step in _json(name)[key][1:])


@dataclass(frozen=True)
class Case:
    """One measured run: where its s/step comes from and the request/layout that rebuild it."""

    name: str
    measured: Callable[[], float]
    shape: str
    gpu_gib: float
    per_device: int
    completion: int
    nodes: int = 1
    gpus: int = 1  # ranks per node (server mode: trainers per node)
    server: bool = False
    layout: Layout = Layout(1, 0)
    util: float = 0.10
    inter_gbs: float | None = None
    checkpointing: bool = True
    push_across: bool = False  # server mode on a node of its own: the push crosses the link

    def request(self) -> PlanRequest:
        arch = builtin_arch(self.shape)
        assert arch is not None
        return PlanRequest(
            arch=arch, nodes=self.nodes, gpus_per_node=self.gpus, gpu_memory_gib=self.gpu_gib,
            cpu_memory_gib_per_node=250.0, prompt_length=32, completion_length=self.completion,
            per_device_train_batch_size=self.per_device, num_generations=8,
            gradient_checkpointing=self.checkpointing, inter_node_gbs=self.inter_gbs)

    def predicted(self) -> StepTime:
        if self.server:
            return predict_server(self.request(), 1, self.layout.zero, self.layout.offload_optimizer,
                                  across_nodes=True if self.push_across else None)
        return predict(self.request(), self.layout, self.util)


def _resume_7b(run: str, session: int, card: str = "h200x2",
               day: str = "2026-11-27") -> Callable[[], float]:
    """Steps 2..5 of one of sessions 38-43's 7B runs (tests/gpu/test_resume_7b.py on
    2 x H200, three loans; 2 x H100 in sessions 41-43)."""
    return lambda: _steps_after_first(f"{day}-7b-resume-{run}-{card}-session{session}.json")


BENCH_TWO = "2026-11-23-bench-two-16-steps.json"


MULTINODE = "2026-11-23-bench-multinode.json"


LAYOUTS = "2026-11-26-bench-two-1.5b-layouts-h200x2-call1.json"


LAYOUTS_AGAIN = "2026-11-26-bench-two-1.5b-layouts-h200x2-call2.json"


SERVER_45 = "2026-11-26-server-trainer-memory-45-steps-h200x2.json"


# 2 x H100, session 31 (one loan): rounds of plan against server, then ZeRO off and bare TRL
H100_ROUND1 = "2026-11-26-bench-two-1.5b-plan-server-h100x2-round1.json"


H100_ROUND2 = "2026-11-26-bench-two-1.5b-plan-server-h100x2-round2.json"


H100_BARE = "2026-11-26-bench-two-1.5b-hpc-bare-h100x2.json"


# 2 x H100, session 32 (a third loan): plan, server in call A (rebuilt from the run directories:
# the call's timeout cut bench_gpu.py after both runs had finished), then server, plan, server
# and plan, server in two more calls into one folder (server_2, plan_2, server_3)
H100_S32_A = "2026-11-26-bench-two-1.5b-plan-server-h100x2-session32-call-a.json"


H100_S32 = "2026-11-26-bench-two-1.5b-plan-server-h100x2-session32.json"


S32_CALL = {H100_S32_A: "call A", H100_S32: "calls C-D"}


S32_RUNS = {H100_S32_A: ("plan", "server"),
            H100_S32: ("server", "plan", "server_2", "plan_2", "server_3")}  # in the order run


# the GPU sandbox's two-node reference run (ZeRO-3, no recomputation) on the loan whose link
# doctor measured (docs/results/2026-11-26-doctor-bandwidth-sandbox-h100x2.json)
SANDBOX_H100_AGAIN = "2026-11-26-multinode-reference-h100x2-second-loan.json"


SANDBOX_H100_LINK = 2.152


# 2 x H100, 7B, the plan's layout, its runner-up and server mode (session 34)
ONE_7B_S47 = "2026-11-28-bench-one-7b-hpc-bare-h200-session47.json"


SEVEN_B_S34 = "2026-11-26-bench-two-7b-layouts-h100x2-session34.json"


# 2 x H100, 1.5B, the plan against server mode, 8 steps, after the 7B runs' loan (session 34)
PAIR_S34 = "2026-11-27-bench-two-1.5b-plan-server-h100x2-session34.json"


# 2 x H100, 1.5B, session 36 (a seventh loan): three calls into one folder, the plan with ZeRO
# off (no recomputation, the plan's choice) three times, server mode twice, bare TRL between
S36 = "2026-11-27-bench-two-1.5b-hpc-bare-server-h100x2-session36.json"


S36_RUNS = ("default_plan", "bare_dp2", "bare_dp2_2", "default_plan_2", "server", "server_2",
            "default_plan_3", "bare_dp2_3")  # in the order run


# the GPU sandbox's reference run of that loan, and the link doctor measured on it
# (docs/results/2026-11-27-doctor-bandwidth-sandbox-h100x2-session36.json)
SANDBOX_S36 = "2026-11-27-multinode-reference-h100x2-session36.json"


SANDBOX_S36_LINK = 2.553


# the GPU sandbox, session 37 (an eighth loan): bench_multinode.py colocate (the plan's ZeRO-2,
# recomputation on) against server mode on a node of its own, in both orders, and the link
# doctor measured after them (docs/results/2026-11-27-doctor-bandwidth-sandbox-h100x2-session37.json)
S37_ROUNDS = ("2026-11-27-bench-multinode-colocate-server-node-h100x2-session37-round1.json",
              "2026-11-27-bench-multinode-colocate-server-node-h100x2-session37-round2.json")


SANDBOX_S37_LINK = 1.90


# Figures only in markdown: (file and table, s/step).
MARKDOWN = {
    "h100-0.5b-colocate": (FACTS + ", one host table, 0.5B colocate", 1.744),
    "h100-0.5b-server": (FACTS + ", one host table, 0.5B server", 2.561),
    "h100-1.5b-colocate": (FACTS + ", one host table, 1.5B colocate", 2.253),
    "h100-1.5b-server": (FACTS + ", one host table, 1.5B server", 3.230),
    "h100-2nodes-1.5b-zero3": (FACTS + ", two Slurm nodes, 1.5B ZeRO-3", 5.38),
    # session 33's 7B layouts (2 x H100): the raw JSON went back with that session's device
    # folder before it was copied; its table is in docs/benchmarks.md
    "h100-7b-plan-s33": (SESSION_33 + ", plan (TP 2 ZeRO-3 sleep)", 4.297),
    "h100-7b-tp1-offload-s33": (SESSION_33 + ", tp1_offload", 6.789),
    "h100-7b-server-offload-s33": (SESSION_33 + ", server_offload", 9.664),
}


def _markdown(key: str) -> Callable[[], float]:
    return lambda: MARKDOWN[key][1]


def _bench(file: str, key: str) -> Callable[[], float]:
    return lambda: float(_json(file)[key]["step_s"])


def _multinode(file: str, key: str) -> Callable[[], float]:
    """bench_multinode.py's files keep a list of runs per layout (one per round)."""
    return lambda: float(_json(file)["runs"][key][0]["step_s"])


CASES = (
    # 2 x H200, one host, 64 completions a step (docs/benchmarks.md 2026-11-23 fourth session)
    Case("h200 0.5B colocate TP1xDP2", _bench(BENCH_TWO, "default_plan"),
         "qwen2-0.5b", H200, 32, 256, gpus=2),
    Case("h200 0.5B server", _bench(BENCH_TWO, "server"),
         "qwen2-0.5b", H200, 64, 256, server=True),
    Case("h200 0.5B colocate, no recomputation",
         _bench(BENCH_TWO, "no_grad_ckpt"), "qwen2-0.5b", H200, 32, 256, gpus=2,
         checkpointing=False),
    # 2 x H100, one host (gpu-facts 2026-11-25)
    Case("h100 0.5B colocate TP1xDP2", _markdown("h100-0.5b-colocate"), "qwen2-0.5b", H100,
         32, 256, gpus=2),
    Case("h100 0.5B server", _markdown("h100-0.5b-server"), "qwen2-0.5b", H100, 64, 256,
         server=True),
    Case("h100 1.5B colocate TP1xDP2", _markdown("h100-1.5b-colocate"), "qwen2-1.5b", H100,
         32, 256, gpus=2),
    Case("h100 1.5B server", _markdown("h100-1.5b-server"), "qwen2-1.5b", H100, 64, 256,
         server=True),
    # two sandbox nodes over NCCL sockets at 2.68 GB/s (docs/benchmarks.md 2026-11-23 sixth)
    Case("h200 2 nodes 1.5B colocate ZeRO-2",
         lambda: _json(MULTINODE)["runs"]["colocate"][0]["step_s"], "qwen2-1.5b", H200, 32, 256,
         nodes=2, layout=Layout(1, 2), inter_gbs=2.68),
    Case("h200 1.5B server (same host)",
         lambda: _json(MULTINODE)["runs"]["server"][0]["step_s"], "qwen2-1.5b", H200, 64, 256,
         server=True),
    Case("h200 2 nodes 1.5B ZeRO-3",
         lambda: _steps_after_first("2026-11-23-multinode-reference.json", "metrics"),
         "qwen2-1.5b", H200, 8, 128, nodes=2, layout=Layout(1, 3), inter_gbs=2.68),
    Case("h100 2 nodes 1.5B ZeRO-3", _markdown("h100-2nodes-1.5b-zero3"), "qwen2-1.5b", H100,
         8, 128, nodes=2, layout=Layout(1, 3), inter_gbs=2.68),
    # one H200 (docs/benchmarks.md 2026-11-24 session 22)
    Case("h200 1.5B ZeRO off + sleep",
         lambda: _steps_after_first("2026-11-24-memory-phases-1.5b-h200.json"), "qwen2-1.5b",
         H200, 8, 64, layout=Layout(1, 0, sleep=True)),
    Case("h200 7B ZeRO off + sleep",
         lambda: _steps_after_first("2026-11-24-memory-phases-7b-h200.json"), "qwen2-7b",
         H200, 8, 64, layout=Layout(1, 0, sleep=True), util=0.15),
    Case("h200 1.5B ZeRO-3 + optimizer offload + sleep",
         lambda: _steps_after_first("2026-11-24-memory-offload-1.5b-h200.json"), "qwen2-1.5b",
         H200, 8, 64, layout=Layout(1, 3, offload_optimizer=True, sleep=True)),
    # 2 x H200, one host, 1.5B, 64 completions a step, 10 steps (docs/benchmarks.md 2026-11-26):
    # the four colocated layouts and server mode of call 1; call 2 and the 45-step server run
    # repeat two of them on the same machine (rows of their own: the spread between runs)
    Case("h200 1.5B colocate ZeRO-2 TP1xDP2", _bench(LAYOUTS, "plan"),
         "qwen2-1.5b", H200, 32, 256, gpus=2, layout=Layout(1, 2)),
    Case("h200 1.5B colocate ZeRO-2, no recomputation",
         _bench(LAYOUTS, "no_grad_ckpt_plan"), "qwen2-1.5b", H200, 32, 256,
         gpus=2, layout=Layout(1, 2), checkpointing=False),
    Case("h200 1.5B colocate ZeRO-2, no recomputation (call 2)",
         _bench(LAYOUTS_AGAIN, "no_grad_ckpt_plan"), "qwen2-1.5b", H200, 32,
         256, gpus=2, layout=Layout(1, 2), checkpointing=False),
    Case("h200 1.5B colocate ZeRO off TP1xDP2", _bench(LAYOUTS, "default_plan"),
         "qwen2-1.5b", H200, 32, 256, gpus=2),
    Case("h200 1.5B colocate ZeRO off, no recomputation",
         _bench(LAYOUTS, "no_grad_ckpt"), "qwen2-1.5b", H200, 32, 256, gpus=2,
         checkpointing=False),
    Case("h200 1.5B server (2026-11-26)", _bench(LAYOUTS, "server"),
         "qwen2-1.5b", H200, 64, 256, server=True),
    Case("h200 1.5B server (2026-11-26, call 2)",
         _bench(LAYOUTS_AGAIN, "server"), "qwen2-1.5b", H200, 64, 256,
         server=True),
    Case("h200 1.5B server (2026-11-26, 45 steps)",
         _bench(SERVER_45, "server"), "qwen2-1.5b", H200, 64, 256, server=True),
    # 2 x H100, one host, 1.5B, 64 completions a step, 10 steps (docs/benchmarks.md, session 31)
    Case("h100 1.5B colocate ZeRO-2 TP1xDP2 (2026-11-26, round 1)",
         _bench(H100_ROUND1, "plan"), "qwen2-1.5b", H100, 32, 256, gpus=2,
         layout=Layout(1, 2)),
    Case("h100 1.5B colocate ZeRO-2 TP1xDP2 (2026-11-26, round 2)",
         _bench(H100_ROUND2, "plan"), "qwen2-1.5b", H100, 32, 256, gpus=2,
         layout=Layout(1, 2)),
    Case("h100 1.5B server (2026-11-26, round 1)", _bench(H100_ROUND1, "server"),
         "qwen2-1.5b", H100, 64, 256, server=True),
    Case("h100 1.5B server (2026-11-26, round 2)", _bench(H100_ROUND2, "server"),
         "qwen2-1.5b", H100, 64, 256, server=True),
    Case("h100 1.5B colocate ZeRO off TP1xDP2 (2026-11-26)",
         _bench(H100_BARE, "default_plan"), "qwen2-1.5b", H100, 32, 256, gpus=2),
    # 2 x H100, one host, 1.5B, session 32: every run of the plan's layout and of server mode
    *(Case(f"h100 1.5B colocate ZeRO-2 TP1xDP2 (2026-11-26 session 32, {S32_CALL[file]}, {key})",
           _bench(file, key), "qwen2-1.5b", H100, 32, 256, gpus=2, layout=Layout(1, 2))
      for file, keys in S32_RUNS.items() for key in keys if key.startswith("plan")),
    *(Case(f"h100 1.5B server (2026-11-26 session 32, {S32_CALL[file]}, {key})",
           _bench(file, key), "qwen2-1.5b", H100, 64, 256, server=True)
      for file, keys in S32_RUNS.items() for key in keys if key.startswith("server")),
    # session 34's loan: one more pair, 8 steps, the plan first with cold caches
    Case("h100 1.5B colocate ZeRO-2 TP1xDP2 (session 34, 8 steps)", _bench(PAIR_S34, "plan"),
         "qwen2-1.5b", H100, 32, 256, gpus=2, layout=Layout(1, 2)),
    Case("h100 1.5B server (session 34, 8 steps)", _bench(PAIR_S34, "server"),
         "qwen2-1.5b", H100, 64, 256, server=True),
    # the GPU sandbox, 2 nodes x 1 H100, ZeRO-3 without recomputation (the plan's choice)
    Case("h100 2 nodes 1.5B ZeRO-3, no recomputation (2026-11-26)",
         lambda: _steps_after_first(SANDBOX_H100_AGAIN, "metrics"), "qwen2-1.5b", H100, 8, 128,
         nodes=2, layout=Layout(1, 3), inter_gbs=SANDBOX_H100_LINK, checkpointing=False),
    # session 36's loan: the plan with ZeRO off and server mode, then the sandbox at its link
    *(Case(f"h100 1.5B colocate ZeRO off, no recomputation (session 36, {key})",
           _bench(S36, key), "qwen2-1.5b", H100, 32, 256, gpus=2, checkpointing=False)
      for key in S36_RUNS if key.startswith("default_plan")),
    *(Case(f"h100 1.5B server (session 36, {key})", _bench(S36, key), "qwen2-1.5b", H100, 64,
           256, server=True) for key in S36_RUNS if key.startswith("server")),
    Case("h100 2 nodes 1.5B ZeRO-3, no recomputation (session 36)",
         lambda: _steps_after_first(SANDBOX_S36, "metrics"), "qwen2-1.5b", H100, 8, 128,
         nodes=2, layout=Layout(1, 3), inter_gbs=SANDBOX_S36_LINK, checkpointing=False),
    # the GPU sandbox, session 37: colocate against server mode on a node of its own
    *(Case(f"h100 2 nodes 1.5B colocate ZeRO-2 (session 37, round {i})",
           _multinode(file, "colocate"), "qwen2-1.5b", H100, 32, 256, nodes=2,
           layout=Layout(1, 2), inter_gbs=SANDBOX_S37_LINK) for i, file in enumerate(S37_ROUNDS, 1)),
    *(Case(f"h100 1.5B server on a node of its own (session 37, round {i})",
           _multinode(file, "server_node"), "qwen2-1.5b", H100, 64, 256, server=True,
           inter_gbs=SANDBOX_S37_LINK, push_across=True) for i, file in enumerate(S37_ROUNDS, 1)),
    # 2 x H100, 7B TP 2 ZeRO-3 (docs/benchmarks.md 2026-11-25)
    Case("h100 7B TP2 ZeRO-3 + sleep",
         lambda: _steps_after_first("2026-11-25-7b-resume-reference-warm-h100x2.json"),
         "qwen2-7b", H100, 8, 64, gpus=2, layout=Layout(2, 3, sleep=True), util=0.15),
    # 2 x H100, 7B, 64 completions of 256 tokens, 6 steps (session 33): the plan's layout, its
    # runner-up and server mode, whose one trainer fits only with ZeRO-3 and optimizer offload
    Case("h100 7B TP2 ZeRO-3 + sleep, 64 completions (session 33)",
         _markdown("h100-7b-plan-s33"), "qwen2-7b", H100, 32, 256, gpus=2,
         layout=Layout(2, 3, sleep=True), util=0.15),
    Case("h100 7B TP1xDP2 ZeRO-3 + optimizer offload (session 33)",
         _markdown("h100-7b-tp1-offload-s33"), "qwen2-7b", H100, 32, 256, gpus=2,
         layout=Layout(1, 3, offload_optimizer=True), util=0.15),
    Case("h100 7B server, trainer ZeRO-3 + optimizer offload (session 33)",
         _markdown("h100-7b-server-offload-s33"), "qwen2-7b", H100, 64, 256, server=True,
         layout=Layout(1, 3, offload_optimizer=True)),
    # the same three on the next loan (session 34), with their raw JSON
    Case("h100 7B TP2 ZeRO-3 + sleep, 64 completions (session 34)",
         _bench(SEVEN_B_S34, "plan"), "qwen2-7b", H100, 32, 256, gpus=2,
         layout=Layout(2, 3, sleep=True), util=0.15),
    Case("h100 7B TP1xDP2 ZeRO-3 + optimizer offload (session 34)",
         _bench(SEVEN_B_S34, "tp1_offload"), "qwen2-7b", H100, 32, 256, gpus=2,
         layout=Layout(1, 3, offload_optimizer=True), util=0.15),
    Case("h100 7B server, trainer ZeRO-3 + optimizer offload (session 34)",
         _bench(SEVEN_B_S34, "server_offload"), "qwen2-7b", H100, 64, 256, server=True,
         layout=Layout(1, 3, offload_optimizer=True)),
    # 2 x H200, 7B, the plan's layout on that card: TP 1 x DP 2, ZeRO-2, no recomputation, 5
    # steps of 8 prompts x 8 completions of 64 tokens (sessions 38-40, docs/benchmarks.md; in
    # session 40 the engines started from pushed weights, which changes no step)
    *(Case(f"h200 7B TP1xDP2 ZeRO-2, no recomputation (session {session}, {run})",
           _resume_7b(run, session),
           "qwen2-7b", H200, 8, 64, gpus=2, layout=Layout(1, 2), util=0.15, checkpointing=False)
      for session in (38, 39, 40) for run in ("reference", "second")),
    # 2 x H100, 7B, the plan's layout on that card: TP 2, ZeRO-3, sleep mode, no recomputation,
    # the same 5 steps (session 41, with rank 0's start-up under cProfile, which ends at train
    # begin and so times no step)
    *(Case(f"h100 7B TP2 ZeRO-3 sleep, no recomputation (session 41, {run})",
           _resume_7b(run, 41, "h100x2"), "qwen2-7b", H100, 8, 64, gpus=2,
           layout=Layout(2, 3, sleep=True), util=0.15, checkpointing=False)
      for run in ("reference", "second")),
    # the same layout and steps on a second 2 x H100 loan (session 42: the bytecode cache and the
    # frozen heap, which change start-up, not steps); its first hold's reference as well
    *(Case(f"h100 7B TP2 ZeRO-3 sleep, no recomputation (session 42, {run})",
           _resume_7b(run, 42, "h100x2"), "qwen2-7b", H100, 8, 64, gpus=2,
           layout=Layout(2, 3, sleep=True), util=0.15, checkpointing=False)
      for run in ("reference", "reference-first-hold")),
    # and a third 2 x H100 loan (session 43, two holds: the restarts' rounds)
    *(Case(f"h100 7B TP2 ZeRO-3 sleep, no recomputation (session 43, {run})",
           _resume_7b(run, 43, "h100x2", "2026-11-28"), "qwen2-7b", H100, 8, 64, gpus=2,
           layout=Layout(2, 3, sleep=True), util=0.15, checkpointing=False)
      for run in ("reference", "reference-first-hold")),
    # 2 x H200 again (session 45): the H200 layout's reference, pageable checkpoint copies
    Case("h200 7B TP1xDP2 ZeRO-2, no recomputation (session 45, reference)",
         _resume_7b("reference", 45, "h200x2", "2026-11-28"), "qwen2-7b", H200, 8, 64, gpus=2,
         layout=Layout(1, 2), util=0.15, checkpointing=False),
    # one H200 (session 47, bench_gpu.py one --shape qwen2-7b): the plan's own choice for 7B on
    # one GPU (ZeRO off, sleep mode, recomputation), 64 completions of 256 tokens, 6 steps; three
    # runs beside bare TRL and the ``planned`` run, two holds of one session
    *(Case(f"h200 7B ZeRO off + sleep, 32 x 256 (session 47, {run})",
           _bench(ONE_7B_S47, run), "qwen2-7b", H200, 32, 256,
           layout=Layout(1, 0, sleep=True), util=0.15)
      for run in ("hpc_grpo_1", "hpc_grpo_2", "hpc_grpo_3", "planned_a")),
)


# Cases the model misses by more than TOLERANCE, and why. The H100 rows come from loans of the
# kind a day apart: the same layouts ran 1.4-1.6x faster on 2026-11-26 than on 2026-11-25
# (server 2.07-2.27 against 3.23 s/step, ZeRO off 1.520 against 2.253), and one layout twice
# on session 31's loan spread 29 % (ZeRO-2 1.465 and 1.891). No one constant holds every loan
# within 20 %; the fit (terms.py) sits between them. A third loan (session 32) ran that layout
# three times at 1.60-1.65 s/step and server mode four times at 2.23-2.59: all seven held.
# Each listed case must really miss (else it leaves this list) and stay within MISS_BOUND, so a
# worse model still fails.
MISSES = {
    "h100 0.5B server": "2026-11-25 loan, slower than the 2026-11-26 one",
    "h100 1.5B server": "2026-11-25 loan (3.230 s/step; 2.071-2.266 on 2026-11-26)",
    "h100 1.5B colocate ZeRO-2 TP1xDP2 (2026-11-26, round 1)":
        "the fast one of two runs of this layout on one loan (1.465 against 1.891 s/step)",
    "h100 1.5B colocate ZeRO off TP1xDP2 (2026-11-26)":
        "the same loan's fast runs (1.520 s/step, ZeRO-2's round 1 was 1.465)",
    "h100 1.5B colocate ZeRO off, no recomputation (session 36, default_plan_2)":
        "the fast one of three runs of this layout on one loan (1.398 against 1.618 and 1.753)",
    "h200 7B TP1xDP2 ZeRO-2, no recomputation (session 38, reference)":
        "a 0.67 s step, a third of it the model's fixed 0.25 s for rewards and logging; the same "
        "layout's second run on the loan (0.756 s/step) is held",
    "h200 7B TP1xDP2 ZeRO-2, no recomputation (session 45, reference)":
        "0.697 s/step, +21 %: the H200 layout's seven runs over four loans spread 0.673-0.882 "
        "s/step (mean 0.763); the model's 0.844 sits 10.6 % above their mean",
}


def cases_as_of(session: int) -> list[Case]:
    """The cases as session ``session`` left them: none that a later session added (their names
    say "(session N,"), so a dated section's count stays what it was."""
    def added_in(case: Case) -> int:
        found = re.search(r"\(session (\d+)\b", case.name)
        return int(found.group(1)) if found else 0

    return [c for c in CASES if added_in(c) <= session]


def counts_as_of(session: int) -> str:
    """How a dated section of docs/benchmarks.md states the calibration as ``session`` left
    it: "N cases, M within 20 %, the same K listed misses"."""
    then = cases_as_of(session)
    missed = sum(case.name in MISSES for case in then)
    return f"{len(then)} cases, {len(then) - missed} within 20 %, the same " \
        f"{missed} listed misses"


def _error(case: Case) -> float:
    return case.predicted().seconds / case.measured() - 1
