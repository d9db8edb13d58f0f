"""The repository's paths, defined once for every test module (a helper module: it holds no
tests). Import them: ``from tests.paths import REPO, RESULTS``."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hpc_grpo"
TESTS = REPO / "tests"
DOCS = REPO / "docs"
RESULTS = DOCS / "results"
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
RECIPES = REPO / "recipes"
SITE_CONFIGS = REPO / "site_configs"
BENCHMARKS = REPO / "benchmarks"
