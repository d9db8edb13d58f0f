"""What docs/benchmarks.md says about session 46's GPU calls (2 x H200), held to the raw JSON:
the two sandbox restarts' timelines, their saves split by part and their start-ups, and the 7B
stop's pinned save, its parts, its host memory and the resume's equality."""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean
from typing import Any

from tests.unit.benchmarks.lora_results import docs_section
from tests.unit.benchmarks.startup_sections import restart_timeline
from tests.unit.planner import calibration_cases as calibration

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
HEADING = "## 2026-11-28 (session 46), GPU"
KEYS = ("reward_mean", "reward_std", "loss")
CALLS = ("a", "b")
SAVED = re.compile(r"(checkpoint-\d+) saved in ([\d.]+) s on this rank: (.*)")


def _json(name: str, session: int = 46) -> Any:
    return json.loads((RESULTS / f"2026-11-28-{name}-h200x2-session{session}.json").read_text())


def _timeline(call: str) -> dict[str, float]:
    saved = _json(f"multinode-requeue-{call}")
    return restart_timeline(saved["signalled"], saved["metrics"], saved["run_files"],
                            saved["startup"], saved["restarts"])


def _parts(lines: dict[str, list[str]], folder: str) -> list[tuple[float, dict[str, float]]]:
    """Each rank's (total, parts) for one checkpoint, from its rank log's save line."""
    out = []
    for rank in sorted(lines):
        for line in lines[rank]:
            found = SAVED.search(line)
            if found and found.group(1) == folder:
                split = dict(x.rsplit(" ", 1) for x in found.group(3).split(", "))
                out.append((float(found.group(2)), {k: float(v) for k, v in split.items()}))
    return out


def _both(values: list[float], digits: int = 1) -> str:
    return " and ".join(f"{v:.{digits}f}" for v in values)


def test_the_restart_table_and_the_goal() -> None:
    section = docs_section(HEADING)
    lines = {call: _timeline(call) for call in CALLS}
    for key in ("step3", "requeued", "started", "process", "record"):
        assert f"| +{lines['a'][key]:.1f} s | +{lines['b'][key]:.1f} s |" in section, key
    firsts = [lines[c]["first_new"] for c in CALLS]
    assert f"| **+{firsts[0]:.1f} s** | **+{firsts[1]:.1f} s** |" in section
    for call in CALLS:
        assert round(_json(f"multinode-requeue-{call}")["first_new_step_after_s"], 1) == round(
            lines[call]["first_new"], 1)
    assert f"holds in both: {_both(firsts)} s**" in section
    earlier = _json("multinode-requeue-pinned", 45)["first_new_step_after_s"]
    assert f"session 45's {earlier:.1f} s three" in section
    assert f"mean {mean([*firsts, earlier]):.1f} s" in section
    assert max([*firsts, earlier]) <= 60
    holds = [lines[c]["started"] - lines[c]["requeued"] for c in CALLS]
    assert f"**Slurm's hold:** {_both(holds)} s" in section


def test_each_restart_resumed_the_reference_s_steps() -> None:
    for call in CALLS:
        saved = _json(f"multinode-requeue-{call}")
        (restart,) = saved["restarts"]
        assert restart["resumed_from_step"] == 3 and restart["steps_lost"] == 0
        assert restart["cause"] == "user signal"
        ref = _json(f"multinode-reference-{call}")["metrics"]
        assert [[m[k] for k in KEYS] for m in saved["metrics"]] == [[m[k] for k in KEYS] for m in ref]
        assert len(ref) == 6 and saved["run_files"]["deepspeed_zero"]["stage"] == 3


def test_the_stop_s_save_split_on_both_ranks() -> None:
    section = docs_section(HEADING)
    words = []
    for call in CALLS:
        ranks = _parts(_json(f"multinode-requeue-{call}")["run_files"]["save_lines"], "checkpoint-3")
        assert len(ranks) == 2 and len({total for total, _ in ranks}) == 1  # same total, both
        assert all(parts["model files"] <= 0.01 for _, parts in ranks)  # ZeRO-3: no model file
        words.append((ranks[0][0], [p["optimizer"] for _, p in ranks],
                      [p["rest of save"] for _, p in ranks],
                      max(p["waiting for ranks"] for _, p in ranks)))
    (total_a, opt_a, rest_a, wait_a), (total_b, opt_b, rest_b, _) = words
    assert (f"{total_a:.2f} s in call a (DeepSpeed's optimizer save {_both(sorted(opt_a), 2)} s, "
            in section.replace("\n  ", " "))
    assert f"pinned blocks, {_both(sorted(rest_a), 2)} s, waiting for the other rank {wait_a:.2f} s" \
        in section.replace("\n  ", " ")
    assert (f"and {total_b:.2f} s in call b ({_both(sorted(opt_b), 2)} s; "
            f"{_both(sorted(rest_b), 2)} s)") in section.replace("\n  ", " ")
    planned = _json("multinode-reference-a")["run"]["checkpoint_bytes"]
    assert f"half of the planned {planned / 1e9:.2f} GB checkpoint" in section.replace("\n  ", " ")
    rates = [planned / 2 / 1e9 / max(o) for o in (opt_a, opt_b)] + [
        planned / 2 / 1e9 / min(o) for o in (opt_a, opt_b)]
    assert f"{min(rates):.1f}-{max(rates):.1f} GB/s a rank" in section.replace("\n  ", " ")


def test_the_new_attempts_start_ups() -> None:
    section = docs_section(HEADING).replace("\n  ", " ")
    new = [_json(f"multinode-requeue-{c}")["startup"][1] for c in CALLS]
    parts = [n["parts_s"] for n in new]
    trainer = [n["trainer_parts_s"] for n in new]
    assert f"rank 0: {_both([n['total_s'] for n in new])} s**" in section
    for key, words in (("torch_and_group", "torch and the process group"),
                       ("prepare_and_load", "preparing and loading"), ("trainer", "the trainer"),
                       ("first_step", "the first step")):
        assert f"{words} {_both([p[key] for p in parts])} s" in section, key
    loads = [n["prepare_parts_s"]["deepspeed_checkpoint_load"] for n in new]
    assert f"(DeepSpeed's checkpoint load {_both(loads)} s)" in section
    assert f"**{_both([t['runtime_imports'] for t in trainer])} s**" in section
    for key, words in (("trainer_import", "TRL's import"), ("model_load", "model load"),
                       ("engine_start", "engine start"), ("checks_and_inputs", "checks and inputs"),
                       ("heap_freeze", "heap freeze")):
        assert f"{words} {_both([t[key] for t in trainer])} s" in section, key
    assert all(t["trainer_init_other"] + t["resume_and_hooks"] < 0.2 for t in trainer)
    for p, t in zip(parts, trainer, strict=True):  # the named stretches account for the part
        assert abs(sum(t.values()) - p["trainer"]) < 0.05, (p, t)
    imports = [p["torch_and_group"] + t["runtime_imports"] + t["trainer_import"]
               for p, t in zip(parts, trainer, strict=True)]
    assert f"The imports ({_both(imports)} s with torch's)" in section
    assert all(i > t["engine_start"] for i, t in zip(imports, trainer, strict=True))


def test_the_7b_stop_save_pinned_and_split() -> None:
    section = docs_section(HEADING).replace("\n  ", " ")
    stop, ref = _json("7b-resume-stop"), _json("7b-resume-reference")
    ckpt = stop["checkpoint"]
    assert (f"**The stop's save (checkpoint-2): {ckpt['bytes'] / 2**30:.2f} GiB on disk against "
            f"{stop['checkpoint_bytes_planned'] / 2**30:.2f} GiB planned, {ckpt['save_s']:.1f} s "
            f"({ckpt['bytes'] / ckpt['save_s'] / 1e9:.1f} GB/s)**") in section
    earlier = _json("7b-resume-stop", 45)["checkpoint"]
    assert f"pageable copies: {earlier['save_s']:.1f} s" in section
    assert ckpt["save_s"] < earlier["save_s"]
    r = ref["checkpoint"]
    assert f"checkpoint-5: {r['save_s']:.1f} s ({r['bytes'] / r['save_s'] / 1e9:.1f} GB/s" in section
    assert f"came {stop['attempt']['first_new_step_s']:.1f} s after the node task" in section
    for name in ("stop", "reference"):
        lines = _json(f"7b-resume-{name}")["save_lines"]
        pinned = [x for rank in lines.values() for x in rank if "pinned memory where 2 rank(s)'" in x]
        assert len(pinned) == 2 and not any("pageable:" in x for r in lines.values() for x in r)
    ranks = _parts(stop["save_lines"], "checkpoint-2")
    for (_, parts), rank in zip(ranks, ("rank 0", "rank 1"), strict=True):
        m, o, rest = parts["model files"], parts["optimizer"], parts["rest of save"]
        if rank == "rank 0":
            assert (f"rank 0 model files {m:.2f} s, DeepSpeed's optimizer save {o:.2f} s, the "
                    f"rest {rest:.2f} s") in section
        else:
            assert f"rank 1 {m:.2f}, {o:.2f} and {rest:.2f} s" in section
    files = ckpt["files"]
    assert (f"`model.safetensors`, {files['model.safetensors'] / 1e9:.2f} GB of bf16 weights "
            f"that DeepSpeed's `mp_rank_00_model_states.pt` "
            f"({files['mp_rank_00_model_states.pt'] / 1e9:.2f} GB)") in section
    without = (stop["checkpoint_bytes_planned"] - files["model.safetensors"]) / 2**30
    assert f"sizes the 7B checkpoint at {without:.1f} GiB" in section
    a, b = stop["attempt"], _json("7b-resume-stop", 45)["attempt"]
    assert (f"peak {a['host_rss_peak_gib']:.1f} GiB resident, {a['host_pss_peak_gib']:.1f} GiB "
            f"proportional (session 45, pageable: {b['host_rss_peak_gib']:.1f} and "
            f"{b['host_pss_peak_gib']:.1f} GiB)") in section


def test_the_7b_resume_equals_the_second_run() -> None:
    section = docs_section(HEADING).replace("\n  ", " ")
    resumed, second, ref = (_json(f"7b-resume-{n}") for n in ("resumed", "second", "reference"))
    rows = [[m[k] for k in KEYS] for m in ref["steps"]]
    assert [[m[k] for k in KEYS] for m in second["steps"]] == rows and len(rows) == 5
    assert resumed["steps"] == resumed["reference"]
    assert [[m[k] for k in KEYS] for m in resumed["steps"]] == rows
    assert resumed["restarts"][0]["resumed_from_step"] == 2
    assert f"step: {resumed['attempt']['first_new_step_s']:.1f} s" in section
    new = resumed["startup"][-1]["prepare_parts_s"]
    assert (f"accelerate's prepare {new['accelerate_prepare']:.1f} s and DeepSpeed's checkpoint "
            f"load {new['deepspeed_checkpoint_load']:.1f} s") in section
    cached = [re.search(r"([\d.]+) GiB of it found in the page cache", x) for x in resumed["prefetch"]]
    assert f"({_both([float(c.group(1)) for c in cached if c])} GiB)" in section
    mapped = {re.search(r"mapped \(([\d.]+) GiB\), 0 read whole", x).group(1)  # type: ignore[union-attr]
              for x in resumed["checkpoint_read"]}
    assert mapped == {"61.9"} and "(3 files, 61.9 GiB, none read whole)" in section


def test_the_7b_step_times_against_the_prediction() -> None:
    section = docs_section(HEADING).replace("\n  ", " ")
    (case,) = [c for c in calibration.CASES if "(session 45, reference)" in c.name]
    predicted = case.predicted().seconds
    means = [mean(m["step_time"] for m in _json(f"7b-resume-{n}")["steps"] if m["step"] >= 2)
             for n in ("reference", "second")]
    assert (f"reference {means[0]:.3f} s/step, second run {means[1]:.3f}, against "
            f"{predicted:.3f} predicted ({predicted / means[0] - 1:+.0%} and "
            f"{predicted / means[1] - 1:+.0%})") in section.replace(" %", "%")
    assert all(predicted / m - 1 > 0.2 for m in means)  # misses, as the section says


def test_the_zero2_checkpoint_without_a_model_file_on_two_gpus() -> None:
    section = docs_section(HEADING).replace("\n  ", " ")
    saved = _json("zero2-checkpoint-export")
    files = saved["checkpoint_files"]
    assert saved["test_passed"] and saved["deepspeed"]["zero_stage"] == 2
    assert "model.safetensors" not in files and "global_step2/mp_rank_00_model_states.pt" in files
    measured, planned = saved["checkpoint_bytes_measured"], saved["checkpoint_bytes_planned"]
    assert measured == sum(files.values())
    assert (f"**{measured / 1e9:.2f} GB on disk against {planned / 1e9:.2f} GB planned** "
            f"({planned / measured - 1:+.1%})") in section.replace(" %", "%")
    assert abs(planned / measured - 1) < 0.03  # the plan without the model file
    ranks = _parts(saved["save_lines"], "checkpoint-2")
    assert f"3.12 s, model files {_both(sorted(p['model files'] for _, p in ranks)[::-1], 2)} s" \
        in section and {round(t, 2) for t, _ in ranks} == {3.12}
    assert f"save {_both(sorted(p['optimizer'] for _, p in ranks), 2)} s" in section
    (export,) = saved["exports"]
    check = export["check"]
    assert export["layout"] == "zero" and check["passed"] and check["vllm"]["passed"]
    assert f"(max |delta log p| {check['max_abs_diff']:.1f})" in section
    assert f"(mean {check['vllm']['mean_abs_diff']:.4f})" in section
