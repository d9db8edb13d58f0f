"""The checker behind tests/unit/benchmarks/test_doc_claims.py: what the dated sections of
docs/benchmarks.md state, held to the saved results in docs/results, as listed in claims.yaml.

claims.yaml lists one entry per dated section: its ``heading``, optionally ``results`` (the
pattern of the section's result file names, ``{}`` standing for the short name ``J`` is given)
and ``claims``, one per line (a line that starts with a space continues the one above):

* ``name = expression`` binds a value for the lines below it (no claim);
* an expression that gives a string is a figure as the section must quote it (an f-string
  built from the JSON, with the doc's rounding), and a list of strings is several;
* any other expression is a claim that must be true (an equality, an ordering, a bound).

Expressions are Python expressions limited to the operations below (``OPERATIONS``): reading a
result, arithmetic, comparisons, comprehensions and these named operations. No attribute
outside ``ATTRIBUTES`` and no name that starts with ``_`` is reachable, a binding binds names
only, and nothing is imported.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean, median
from typing import Any

import yaml

from hpc_grpo.runs import drift
from hpc_grpo.runtime.rank.generation.engine_weights import NOTE
from tests.gpu.lora_7b_helpers import KEYS, LOSS_RTOL, assert_cold_first_step
from tests.paths import RESULTS
from tests.unit.planner import calibration_cases as calibration

CLAIMS = Path(__file__).with_name("claims.yaml")
SAVE_LINE = re.compile(r"(checkpoint-\d+) saved in ([\d.]+) s on this rank: (.*)")
TRAINER_WORDS = (("trainer_import", "trainer import"), ("model_load", "model load"),
                 ("engine_start", "engine start"), ("checks_and_inputs", "checks and inputs"),
                 ("heap_freeze", "heap freeze"))


def section_text(doc: str, heading: str) -> str:
    """``doc`` from ``heading`` to the next level-2 heading."""
    start = doc.index(heading)
    end = doc.find("\n## ", start + 1)
    return doc[start:] if end < 0 else doc[start:end]


def collapsed(text: str) -> str:
    """Whitespace collapsed, so that a quoted figure matches wherever the markdown wraps."""
    return " ".join(text.split())


# ---- the named operations (besides Python's arithmetic, comparisons and comprehensions) ----

def steps(rows: list[dict[str, Any]], keys: tuple[str, ...] = KEYS) -> list[dict[str, Any]]:
    """The compared keys of each step's row (``None`` where a row lacks one)."""
    return [{k: r.get(k) for k in keys} for r in rows]


def values(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[list[Any]]:
    """Each row's values of ``keys``, in order (a row must have them all)."""
    return [[r[k] for k in keys] for r in rows]


def steps_2_to_5(run: dict[str, Any]) -> float:
    """The mean step time of steps 2-5 (a run's ``steps`` after the first)."""
    return sum(s["step_time"] for s in run["steps"][1:]) / 4


def pct(value: float, spec: str) -> str:
    """``value`` as a percentage the way the doc writes it: ``format(value, spec)`` with a space
    before the ``%``."""
    return format(value, spec).replace("%", " %")


def joined(values: list[Any], spec: str = "", sep: str = ", ") -> str:
    return sep.join(format(v, spec) for v in values)


def both(values: list[float], digits: int = 1) -> str:
    """"a and b" with ``digits`` decimals."""
    return " and ".join(f"{v:.{digits}f}" for v in values)


def span_from(text: str, *markers: str) -> str:
    """``text`` from where ``markers`` are found, each after the one before."""
    at = 0
    for marker in markers:
        at = text.index(marker, at)
    return text[at:]


def found(pattern: str, text: str, group: int = 1) -> str:
    """The ``group`` of ``pattern``'s first match in ``text`` (the claim fails if none)."""
    match = re.search(pattern, text)
    if match is None:
        raise AssertionError(f"{pattern!r} not in {text!r}")
    return match.group(group)


def matches(pattern: str, texts: list[str], group: int = 1) -> list[str]:
    """The ``group`` of ``pattern``'s match in each of ``texts`` that has one."""
    return [m.group(group) for m in (re.search(pattern, x) for x in texts) if m]


def utc(stamp: str) -> float:
    """An ISO time without zone (sacct's, UTC) as seconds since the epoch."""
    return datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp()


def log_offset(line: str, since: float, year: int = 2026) -> float:
    """Seconds from ``since`` to a vLLM log line's time ("INFO 11-27 08:19:47", UTC)."""
    stamp = line.split(" INFO ")[1][:14]
    at = datetime.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return at.timestamp() - since


def save_parts(lines: dict[str, list[str]], folder: str) -> list[tuple[float, dict[str, float]]]:
    """Each rank's (total, parts) of one checkpoint's save, from its rank log's save line."""
    out = []
    for rank in sorted(lines):
        for line in lines[rank]:
            match = SAVE_LINE.search(line)
            if match and match.group(1) == folder:
                split = dict(x.rsplit(" ", 1) for x in match.group(3).split(", "))
                out.append((float(match.group(2)), {k: float(v) for k, v in split.items()}))
    return out


def restart_timeline(signal: float, metrics: list[dict[str, Any]], run_files: dict[str, Any],
                     startup: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds from the test's signal (after step 2) to each mark of the two-node sandbox
    restart: step 3's end, the requeue, the new job's start, its rank 0 process, the restart
    record and the first new step's end."""
    at = {m["step"]: m["time"] for m in metrics}
    return {"step3": at[3] - signal, "requeued": run_files["first_attempt_requeued_at"] - signal,
            "started": run_files["new_attempt_pickle_loaded_at"] - signal,
            "process": startup[1]["process_start"] - signal,
            "record": restarts[0]["time"] - signal, "first_new": at[4] - signal}


def startup_quotes(startup: dict[str, Any], engine: str = "engine start") -> list[str]:
    """How a section states one attempt's start-up parts and the trainer part's timed stretches,
    "<words> <seconds, 1 decimal>"; ``engine``: how it words the engine start."""
    parts, trainer = startup["parts_s"], startup["trainer_parts_s"]
    quoted = [f"torch and the process group {parts['torch_and_group']:.1f} s",
              f"preparing and loading {parts['prepare_and_load']:.1f} s",
              f"the first step {parts['first_step']:.1f} s", f"the trainer {parts['trainer']:.1f} s"]
    return quoted + [f"{engine if key == 'engine_start' else words} {trainer[key]:.1f}"
                     for key, words in TRAINER_WORDS]


def restart_row(label: str, restart: dict[str, Any]) -> str:
    """A restart's row of a 7B section's table: node task start to the first new step, then rank
    0's start-up parts (a stop-and-resume of checkpoint-2)."""
    (line,) = restart["startup"]
    parts, inner = line["parts_s"], line["trainer_parts_s"]
    if restart["attempt"]["phase"] != "interrupted" or line["resumed_from_step"] != 2:
        raise AssertionError(f"{label}: not a resume of checkpoint-2")
    cells = [restart["attempt"]["first_new_step_s"], parts["torch_and_group"],
             inner["checks_and_inputs"], inner["trainer_import"], inner["model_load"],
             inner["engine_start"], parts["prepare_and_load"], parts["first_step"]]
    return f"| {label} | {' | '.join(str(c) for c in cells)} |"


def case(name: str) -> calibration.Case:
    """The calibration case of that name."""
    (found_case,) = [c for c in calibration.CASES if c.name == name]
    return found_case


def cases(part: str) -> list[calibration.Case]:
    """The calibration cases whose names contain ``part``."""
    return [c for c in calibration.CASES if part in c.name]


def cold_first_step_ok(row: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    """The 7B LoRA GPU test's own check of a cold restart's first step (tests/gpu)."""
    assert_cold_first_step(row, rows)
    return True


OPERATIONS: dict[str, Any] = {
    # Python's own, side-effect free
    "abs": abs, "all": all, "any": any, "bool": bool, "dict": dict, "enumerate": enumerate,
    "float": float, "format": format, "int": int, "len": len, "list": list, "max": max,
    "min": min, "range": range, "round": round, "set": set, "sorted": sorted, "str": str,
    "sum": sum, "tuple": tuple, "zip": zip, "mean": mean, "median": median,
    "True": True, "False": False, "None": None,
    # reading and shaping the results
    "steps": steps, "values": values, "steps_2_to_5": steps_2_to_5, "found": found,
    "span_from": span_from, "matches": matches,
    "utc": utc, "log_offset": log_offset, "save_parts": save_parts,
    "restart_timeline": restart_timeline,
    # how the doc words a figure
    "pct": pct, "joined": joined, "both": both, "startup_quotes": startup_quotes,
    "restart_row": restart_row,
    # the step-time model's calibration (tests/unit/planner/calibration_cases.py)
    "case": case, "cases": cases, "cal_error": calibration._error,
    "cases_as_of": calibration.cases_as_of, "counts_as_of": calibration.counts_as_of,
    "MISSES": calibration.MISSES, "TOLERANCE": calibration.TOLERANCE,
    "S37_ROUNDS": calibration.S37_ROUNDS, "SANDBOX_S37_LINK": calibration.SANDBOX_S37_LINK,
    # the runtime's and the GPU tests' own definitions
    "drift_exceeds": drift.exceeds, "ENGINE_NOTE": NOTE, "KEYS": KEYS, "LOSS_RTOL": LOSS_RTOL,
    "cold_first_step_ok": cold_first_step_ok,
}
# the attributes a claim may read or call: string and mapping methods that change nothing, and a
# calibration case's name, measured and predicted seconds
ATTRIBUTES = {"split", "rsplit", "startswith", "endswith", "replace", "strip", "removesuffix",
              "count", "index", "find", "items", "values", "keys", "get", "join", "name",
              "measured", "predicted", "seconds"}
ALLOWED = (ast.Expression, ast.Module, ast.Expr, ast.Assign, ast.Name, ast.Load, ast.Store,
           ast.Constant, ast.JoinedStr, ast.FormattedValue, ast.Attribute, ast.Subscript,
           ast.Slice, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.Call, ast.keyword,
           ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Starred,
           ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context)


@dataclass
class Claim:
    line: int
    text: str
    binds: bool = False
    code: Any = None


@dataclass
class Section:
    heading: str
    claims: list[Claim]
    results: str = "{}"
    names: list[str] = field(default_factory=list)  # result files it read

    @property
    def count(self) -> int:
        return sum(not c.binds for c in self.claims)


def _parse(text: str, first_line: int) -> list[Claim]:
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), first_line):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t")) and lines:
            lines[-1] = (lines[-1][0], f"{lines[-1][1]} {line.strip()}")
        else:
            lines.append((number, line))
    out = []
    for number, source in lines:
        tree = ast.parse(source, mode="exec")
        if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Expr, ast.Assign)):
            raise ValueError(f"claims.yaml line {number}: one expression or binding: {source}")
        for node in ast.walk(tree):
            bad = not isinstance(node, ALLOWED) or (
                isinstance(node, ast.Attribute) and node.attr not in ATTRIBUTES) or (
                isinstance(node, ast.Name) and node.id.startswith("_")) or (
                isinstance(node, ast.Assign) and not all(
                    isinstance(x, (ast.Name, ast.Tuple, ast.Store)) for t in node.targets
                    for x in ast.walk(t)))
            if bad:
                raise ValueError(f"claims.yaml line {number}: {ast.dump(node)[:60]} not allowed")
        binds = isinstance(tree.body[0], ast.Assign)
        code = compile(tree if binds else ast.Expression(tree.body[0].value),  # type: ignore[attr-defined]
                       f"claims.yaml:{number}", "exec" if binds else "eval")
        out.append(Claim(number, source, binds, code))
    return out


def load(path: Path = CLAIMS) -> list[Section]:
    raw = path.read_text()
    data = yaml.safe_load(raw)
    # the line each entry's claims block starts on, for messages
    root = yaml.compose(raw)
    assert root is not None, path
    (entries,) = [v for k, v in root.value if k.value == "sections"]
    starts = [next(v.start_mark.line + 2 for k, v in entry.value if k.value == "claims")
              for entry in entries.value]
    return [Section(entry["heading"], _parse(entry["claims"], start), entry.get("results", "{}"))
            for entry, start in zip(data["sections"], starts, strict=True)]


def unchecked(path: Path = CLAIMS) -> dict[str, str]:
    """The result files no section reads, each with the reason (claims.yaml's ``unchecked``)."""
    return dict(yaml.safe_load(path.read_text()).get("unchecked") or {})


class Results:
    """Reads the section's result files, once each: ``J(name)``, ``name`` a short name filled
    into the section's ``results`` pattern or a whole file name; .json gives the JSON, .jsonl its
    rows, any other (a log, a profile) its text."""

    def __init__(self, folder: Path, pattern: str) -> None:
        self.folder, self.pattern, self.read = folder, pattern, {}  # type: ignore[var-annotated]

    def __call__(self, name: str) -> Any:
        file = name if re.search(r"\.(json|jsonl|log|txt)$", name) else self.pattern.format(name)
        if file not in self.read:
            text = (self.folder / file).read_text()
            self.read[file] = json.loads(text) if file.endswith(".json") else [
                json.loads(x) for x in text.splitlines()] if file.endswith(".jsonl") else text
        return self.read[file]


def table_row(section: str, label: str) -> list[str]:
    """The cells of the section's markdown table row that starts with ``label``, without bold,
    a trailing " s" or a bracketed comparison."""
    (line,) = [x for x in section.splitlines() if x.startswith(f"| {label} |")]
    return [cell.replace("*", "").split(" (")[0].strip().removesuffix(" s")
            for cell in line.split("|")[2:-1]]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}..."


def namespace(section: Section, doc: str, results: Path = RESULTS) -> dict[str, Any]:
    """What a section's claims see: the named operations, ``J`` (its results), ``section`` (its
    text, whitespace collapsed) and ``row`` (a row of its markdown tables). One namespace (the
    globals), so that comprehensions see the names bound above them."""
    raw = section_text(doc, section.heading)
    return {**OPERATIONS, "J": Results(results, section.results), "section": collapsed(raw),
            "__builtins__": {}, "row": lambda label: table_row(raw, label)}


def check(section: Section, doc: str, results: Path = RESULTS) -> list[str]:
    """Every claim of ``section`` against ``doc`` (docs/benchmarks.md's text) and the results in
    ``results``: the failures, each with its claims.yaml line (none: the section holds)."""
    scope = namespace(section, doc, results)
    text = scope["section"]
    failures = []
    for claim in section.claims:
        where = f"claims.yaml:{claim.line}: {claim.text.strip()}"
        try:
            if claim.binds:
                exec(claim.code, scope)
                continue
            got = eval(claim.code, scope)
        except Exception as exc:  # a claim that cannot be evaluated fails, and says why
            failures.append(f"{where}\n    {type(exc).__name__}: {exc}")
            if claim.binds:
                break  # the lines below need the name
            continue
        if isinstance(got, str):
            got = [got]
        if isinstance(got, list) and all(isinstance(x, str) for x in got):
            missing = [q for q in got if q not in text]
            if missing:
                failures.append(f"{where}\n    not in the section: {missing}")
        elif got is not True:
            names = {n.id for n in ast.walk(ast.parse(claim.text.strip())) if isinstance(n, ast.Name)}
            shown = {n: _show(scope[n]) for n in sorted(names) if n in scope and n not in OPERATIONS
                     and not callable(scope[n])}
            failures.append(f"{where}\n    gave {_show(got)}; {shown}")
    section.names = sorted(scope["J"].read)
    return failures

