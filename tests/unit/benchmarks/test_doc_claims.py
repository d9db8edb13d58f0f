"""Every dated section of docs/benchmarks.md that claims.yaml lists, held to the saved results in
docs/results: each figure the section quotes is the one its JSON gives at the section's rounding,
each ratio, mean and ordering it states holds. A new GPU loan adds results and an entry in
claims.yaml, not a test module. The checker must catch a changed figure in the doc and a changed
value in a result: the last tests run it on doctored copies."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.paths import DOCS, RESULTS
from tests.unit.benchmarks import claims

SECTIONS = claims.load()
DOC = (DOCS / "benchmarks.md").read_text()


@pytest.mark.parametrize("section", SECTIONS, ids=[s.heading.lstrip("# ") for s in SECTIONS])
def test_the_section_states_what_its_results_give(section: claims.Section) -> None:
    failures = claims.check(section, DOC)
    assert not failures, "\n".join(failures)


def test_every_section_is_in_the_doc_once_and_reads_results() -> None:
    headings = [s.heading for s in SECTIONS]
    assert len(set(headings)) == len(headings)
    for section in SECTIONS:
        assert DOC.count(section.heading) == 1, section.heading
        assert section.count > 0
        claims.check(section, DOC)
        assert section.names, f"{section.heading} reads no result"
        assert all((RESULTS / name).exists() for name in section.names)


def test_every_result_of_the_loans_is_read_or_listed() -> None:
    """Each result file of session 34 on (the loans claims.yaml covers, and every later one) is
    read by a section's claims, or listed under ``unchecked`` with the reason."""
    read = {name for section in SECTIONS for name in _names(section)}
    listed = claims.unchecked()
    dated = {p.name for p in RESULTS.iterdir() if _session(p.name) >= 34}
    assert not set(listed) - dated, f"listed, not a result of these loans: {set(listed) - dated}"
    assert not set(listed) & read, f"listed as unchecked, yet read: {set(listed) & read}"
    missing = sorted(dated - read - set(listed))
    assert not missing, f"neither read by a section's claims nor listed as unchecked: {missing}"


def test_the_readme_quotes_its_first_job_as_last_measured() -> None:
    """README's eval figures of its first job (steps 50 and 100, the untrained model) are the
    newest saved measurement's, at the README's rounding (a user once measured another)."""
    newest = max(RESULTS.glob("*-readme-first-job-cpu-*.json"))  # the CPU path README quotes
    evals = json.loads(newest.read_text())["eval"]
    readme = claims.collapsed((DOCS.parent / "README.md").read_text())
    for label in ("step-50", "step-100", "untrained"):
        reward = evals[label]["reward"]
        quoted = f"{reward['mean']:.3g} +- {reward['high'] - reward['mean']:.2g}"
        assert quoted in readme, f"README does not quote {label} of {newest.name}: {quoted}"
    on_gpu = max(RESULTS.glob("*-workstation-readme-first-job-*.json"))
    step100 = json.loads(on_gpu.read_text())["eval_step100_transformers"]["record"]["reward"]
    assert f"step 100 scores about {step100['mean']:.3g}" in readme, on_gpu.name


def _session(name: str) -> int:
    """The session a result file's name carries (0: none)."""
    found = re.search(r"session(\d+)", name)
    return int(found[1]) if found else 0


def _quoted_figures(section: claims.Section) -> list[str]:
    """The figures (with a digit) the section's claims quote."""
    quoted = []
    scope = claims.namespace(section, DOC)
    for claim in section.claims:
        if claim.binds:
            exec(claim.code, scope)
            continue
        got = eval(claim.code, scope)
        for figure in [got] if isinstance(got, str) else got if isinstance(got, list) else []:
            if isinstance(figure, str) and re.search(r"\d", figure):
                quoted.append(figure)
    return quoted


@pytest.mark.parametrize("section", SECTIONS, ids=[s.heading.lstrip("# ") for s in SECTIONS])
def test_a_changed_figure_in_the_doc_fails(section: claims.Section) -> None:
    """Each quoted figure, changed in a copy of the doc (its last digit), fails its section."""
    figures = _quoted_figures(section)
    if not figures:
        pytest.skip("the section quotes no figure with a digit")
    start = DOC.index(section.heading)
    end = DOC.find("\n## ", start + 1)
    body = DOC[start:end]
    changed = 0
    for figure in figures:
        digit = max(i for i, ch in enumerate(figure) if ch.isdigit())
        new = figure[:digit] + str((int(figure[digit]) + 1) % 10) + figure[digit + 1:]
        if new in claims.collapsed(body):
            continue  # the changed figure is stated too: no change to see
        # the figure as the markdown has it, wrapped anywhere
        pattern = r"\s+".join(re.escape(word) for word in figure.split(" "))
        if not re.search(pattern, body):
            continue  # not stated: test_the_section_states_what_its_results_give says so
        doctored = DOC[:start] + re.sub(pattern, new.replace("\\", "\\\\"), body) + DOC[end:]
        assert claims.check(section, doctored), f"{figure!r} -> {new!r} went unnoticed"
        changed += 1
    assert changed


def test_a_changed_result_fails(tmp_path: Path) -> None:
    """A copy of the results with one value changed fails the section that quotes it: session
    49's cached running mean of a rank's imports, and session 36's fourth step's loss."""
    for name in ("2026-11-29-bench-rank-imports-h200-session49.json",
                 "2026-11-27-multinode-reference-h100x2-session36.json"):
        shutil.copy(RESULTS / name, tmp_path / name)
    results = tmp_path
    by_heading = {s.heading: s for s in SECTIONS}
    s49, s36 = by_heading["## 2026-11-29 (session 49), GPU"], by_heading["## 2026-11-27 (session 36)"]
    for section in (s49, s36):  # the copies alone hold, as the originals do
        names = set(_names(section))
        for name in names - {p.name for p in tmp_path.iterdir()}:
            shutil.copy(RESULTS / name, tmp_path / name)
        assert claims.check(section, DOC, results) == []

    imports = json.loads((tmp_path / "2026-11-29-bench-rank-imports-h200-session49.json").read_text())
    imports["bytecode_cache"]["running_mean_s"] += 0.01
    (tmp_path / "2026-11-29-bench-rank-imports-h200-session49.json").write_text(json.dumps(imports))
    assert claims.check(s49, DOC, results)

    reference = json.loads((tmp_path / "2026-11-27-multinode-reference-h100x2-session36.json").read_text())
    reference["metrics"][3]["loss"] += 1e-6
    (tmp_path / "2026-11-27-multinode-reference-h100x2-session36.json").write_text(json.dumps(reference))
    assert claims.check(s36, DOC, results)


def _names(section: claims.Section) -> list[str]:
    claims.check(section, DOC)
    return section.names


def test_a_claim_outside_the_named_operations_is_refused(tmp_path: Path) -> None:
    for claim in ("J.__class__", "__import__('os')", "(lambda: 1)()", "import os"):
        path = tmp_path / "claims.yaml"
        path.write_text(f"sections:\n  - heading: '## x'\n    claims: |\n      {claim}\n")
        with pytest.raises((ValueError, SyntaxError)):
            claims.load(path)
