"""What docs/benchmarks.md says about session 37's GPU calls (2 x H100), held to the raw JSON:
server mode on a node of its own trained and requeued on the GPU sandbox with no step lost, its
restart's parts come from the run's own records, colocate against that server layout in both
orders (ratios recomputed from each run's s/step, not read from the bench's summary), the
model's predictions for those rows, and the link doctor measured."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-27 (session 37)"
ROUNDS = calibration.S37_ROUNDS  # T (colocate first), T' (server node first)


def _json(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def _server_node() -> Any:
    return _json("2026-11-27-multinode-server-node-requeue-resume-h100x2-session37.json")


def _step_s(file: str, layout: str) -> float:
    (run,) = _json(file)["runs"][layout]
    return float(run["step_s"])


def test_the_server_node_run_trained_on_node1_and_resumed_with_no_step_lost() -> None:
    run = _server_node()
    assert run["state"] == "COMPLETED"
    assert run["run"]["nodes"] == 1 and run["run"]["vllm"]["server"]["node"] == 1
    assert [r["hostname"] for r in run["ranks"]] == ["node1"]
    (restart,) = run["restarts"]
    assert restart["cause"] == "user signal" and restart["steps_lost"] == 0
    assert run["signalled_at_step"] == 2 and restart["resumed_from_step"] == 3
    assert [m["step"] for m in run["metrics"]] == [1, 2, 3, 4]


def test_the_server_node_restart_split_is_the_records() -> None:
    run = _server_node()
    signalled = run["signalled"]
    first, new = run["startup"]
    assert first["resumed_from_step"] is None and new["resumed_from_step"] == 3
    process = new["process_start"] - signalled
    record = run["restarts"][0]["time"] - signalled
    first_new = run["first_new_step_after_s"]
    assert 0 < process < record < first_new
    assert abs(process + new["total_s"] - first_new) < 0.1  # the new process's start-up ends it
    in_flight = next(m for m in run["metrics"] if m["step"] == 3)["wall_step_time"]
    parts = new["parts_s"]
    built = process + parts["imports"] + parts["torch_and_group"] + parts["trainer"]
    section = docs_section(HEADING)
    for quoted in (f"+{process:.1f} s", f"+{record:.1f} s", f"**+{first_new:.1f} s**",
                   f"step 3's {in_flight:.1f} s includes the scheduled save",
                   f"built its trainer for {parts['trainer']:.1f} s, until +{built:.1f} s",
                   f"{parts['prepare_and_load']:.1f} s preparing and loading",
                   f"the first step ({parts['first_step']:.1f} s)"):
        assert quoted in section, quoted
    assert first_new > 92.2  # slower than session 36's colocated restart, as the docs say


def _log_offset(line: str, signalled: float) -> float:
    """Seconds from the signal to a vLLM log line's time ("INFO 11-27 08:19:47", UTC)."""
    from datetime import datetime, timezone

    stamp = line.split(" INFO ")[1][:14]
    at = datetime.strptime(f"2026-{stamp}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return at.timestamp() - signalled


def test_the_second_server_start_is_the_logs() -> None:
    """The new vllm serve's start, from its saved log lines: arguments, engine process, engine
    ready; the trainer finished building after the engine was ready."""
    run = _server_node()
    lines = run["server_log_lines"]
    second = lines[max(i for i, line in enumerate(lines) if "non-default args" in line):]
    args, engine, ready = (next(line for line in second if key in line) for key in
                           ("non-default args", "Initializing a V1 LLM engine", "init engine ("))
    offsets = [_log_offset(line, run["signalled"]) for line in (args, engine, ready)]
    new = run["startup"][1]
    parts = new["parts_s"]
    built = new["process_start"] - run["signalled"] + parts["imports"] + \
        parts["torch_and_group"] + parts["trainer"]
    assert offsets == sorted(offsets) and offsets[-1] < built
    section = docs_section(HEADING)
    assert f"logged its arguments at +{offsets[0]:.0f} s" in section
    assert f"started its engine process at +{offsets[1]:.0f} s" in section
    assert f"had its engine ready at +{offsets[2]:.0f} s" in section
    assert "took 34.48 s (compilation: 5.66 s)" in ready and "engine init 34.5 s" in section


def test_colocate_against_the_server_node_in_both_orders_and_pooled() -> None:
    colocate = [_step_s(f, "colocate") for f in ROUNDS]
    server = [_step_s(f, "server_node") for f in ROUNDS]
    by_order = [s / c for s, c in zip(server, colocate, strict=True)]
    for file, ratio in zip(ROUNDS, by_order, strict=True):
        assert abs(ratio - _json(file)["ratio_server_node"]) < 1e-9
    assert min(by_order) >= 1.0  # the "at least 1.0x server mode", in each order
    pooled = mean(server) / mean(colocate)
    section = docs_section(HEADING)
    assert f"**Colocate against server mode: {by_order[0]:.3f}x with colocate first, " \
        f"{by_order[1]:.3f}x with the server first; pooled {mean(colocate):.3f} against " \
        f"{mean(server):.3f} s/step, {pooled:.3f}x.**" in section
    # the bench ran colocate first in T, the server node first in T'
    assert list(_json(ROUNDS[0])["runs"]) == ["colocate", "server_node"]
    assert list(_json(ROUNDS[1])["runs"]) == ["server_node", "colocate"]


def test_the_table_quotes_each_run_and_its_prediction() -> None:
    section = docs_section(HEADING)
    cases = {c.name: c for c in calibration.CASES if "session 37" in c.name}
    assert len(cases) == 4
    for i, file in enumerate(ROUNDS, 1):
        names = {"colocate": f"h100 2 nodes 1.5B colocate ZeRO-2 (session 37, round {i})",
                 "server_node": f"h100 1.5B server on a node of its own (session 37, round {i})"}
        for layout, name in names.items():
            (run,) = _json(file)["runs"][layout]
            predicted = cases[name].predicted().seconds
            error = predicted / run["step_s"] - 1
            assert f"| {run['step_s']:.3f} | {run['tokens_per_s']:,.0f} |" in section, (file, layout)
            assert f"| {predicted:.3f} ({error:+.1%})".replace("%", " %") in section, (name, error)
            assert abs(error) <= calibration.TOLERANCE


def test_the_link_is_the_one_the_calibration_uses() -> None:
    doctor = _json("2026-11-27-doctor-bandwidth-sandbox-h100x2-session37.json")
    links = {int(mib): gbs for mib, gbs in doctor["links"]["inter"]["by_size"].items()}
    assert doctor["links"]["inter"]["gbs"] == links[256] == calibration.SANDBOX_S37_LINK
    assert f"**{links[256]:.3f} GB/s at 256 MiB** ({links[4]:.3f} at 4 MiB, {links[16]:.3f} at " \
        f"16, {links[64]:.3f} at 64)" in docs_section(HEADING)


def test_the_server_wrote_its_caches_in_the_output_root() -> None:
    run = _json("2026-11-27-server-mode-caches-h100x2-session37.json")
    server = run["server"]
    assert len(server["step_times"]) == server["server_requests"] == 6
    where = run["where_the_server_wrote"]
    missing = "ls: cannot access '/root/.cache/vllm': No such file or directory"
    assert where["before"] == [missing] and missing in where["after"]
    assert "ls: cannot access '/tmp/hpc-grpo-*': No such file or directory" in where["after"]
    cache_line = next(line for line in where["after"] if "Using cache directory" in line)
    assert "/tmp/b10/runs/.compile-cache/vllm/" in cache_line
    assert any("init_weight_transfer_engine HTTP" in line for line in where["after"])
    section = docs_section(HEADING)
    assert f"{server['step_s']:.3f} s/step with cold caches" in section
    assert "/tmp/b10/runs/.compile-cache/vllm/torch_compile_cache/" in section
