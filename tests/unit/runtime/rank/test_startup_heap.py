"""The rank's start-up heap (runtime/rank/startup_heap.py): the installed packages' import-name map
computed once for transformers and TRL together, and the imported objects frozen out of the
collector's walks. Freezing is process-wide, so those checks run in a child Python."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from hpc_grpo.runtime.rank import startup_heap
from tests.paths import REPO

ROOT = REPO


def _child(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter of this checkout; its last stdout line is JSON."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_map_is_computed_once_and_each_caller_gets_its_own_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def compute() -> dict[str, list[str]]:
        calls.append(1)
        return {"yaml": ["PyYAML"], "PIL": ["pillow"]}

    monkeypatch.setattr(importlib.metadata, "packages_distributions", compute)
    assert startup_heap.share_package_map({}) is True
    assert startup_heap.share_package_map({}) is False  # installed once, not wrapped twice
    first = importlib.metadata.packages_distributions()
    first["yaml"].append("edited")
    first["new"] = ["x"]
    second = importlib.metadata.packages_distributions()
    assert second == {"yaml": ["PyYAML"], "PIL": ["pillow"]}
    assert len(calls) == 1


def test_off_leaves_the_standard_library_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    original = importlib.metadata.packages_distributions
    monkeypatch.setattr(importlib.metadata, "packages_distributions", original)
    assert startup_heap.share_package_map({"HPC_GRPO_STARTUP_HEAP": "0"}) is False
    assert importlib.metadata.packages_distributions is original
    assert startup_heap.freeze_imported_heap({"HPC_GRPO_STARTUP_HEAP": " 0 "}) == 0


def test_transformers_and_trl_share_one_walk_of_the_installed_packages() -> None:
    """The real libraries: TRL's import-time call and transformers' own one read the map once,
    and get what the standard library computes."""
    result = _child("""
import importlib.metadata as md, json, os
calls = []
real = md.packages_distributions
def counting():
    calls.append(1)
    return real()
md.packages_distributions = counting
from hpc_grpo.runtime.rank import startup_heap
assert startup_heap.share_package_map(os.environ)
import importlib
trl_utils = importlib.import_module("trl.import_utils")
from transformers.utils import import_utils
mapping = import_utils._package_distribution_mapping()
print(json.dumps({"calls": len(calls), "same": mapping == real(),
                  "trl_same": trl_utils.PACKAGE_DISTRIBUTION_MAPPING == real()}))
""")
    assert result == {"calls": 1, "same": True, "trl_same": True}


FREEZE = """
import gc, json, os, sys, weakref
import email.mime.text, json.decoder  # something imported
from hpc_grpo.runtime.rank import startup_heap
class Old:
    pass
old_a, old_b = Old(), Old()
old_a.other, old_b.other = old_b, old_a
for _ in range(3):
    gc.collect(1)  # promoted to the oldest generation, as the imports' garbage would be
gc.disable()
gone = weakref.ref(old_a)
del old_a, old_b
before = gc.get_freeze_count()
frozen = startup_heap.freeze_imported_heap(os.environ)
gc.enable()
old_garbage_freed = gone() is None
module = sys.modules["email.mime.text"]
walked = any(o is module.__dict__ for o in gc.get_objects())
class Cycle:
    pass
a, b = Cycle(), Cycle()
a.other, b.other = b, a
del a, b
print(json.dumps({"before": before, "frozen": frozen, "count": gc.get_freeze_count(),
                  "module_walked": walked, "cycle_collected": gc.collect() >= 2,
                  "old_garbage_freed": old_garbage_freed}))
"""


def test_the_imported_objects_leave_the_collectors_walks_and_new_garbage_is_still_collected() -> None:
    got = _child(FREEZE)
    assert got["before"] == 0 and got["frozen"] == got["count"]
    assert isinstance(got["frozen"], int) and got["frozen"] > 10_000  # the interpreter's imports
    assert got["module_walked"] is False  # a full collection no longer walks an imported module
    assert got["cycle_collected"] is True  # garbage made after the freeze is still found
    assert got["old_garbage_freed"] is True  # garbage of before it is freed, not frozen


def test_off_freezes_nothing() -> None:
    got = _child(FREEZE, {"HPC_GRPO_STARTUP_HEAP": "0"})
    assert got["frozen"] == 0 and got["count"] == 0 and got["module_walked"] is True


def _collections_during(env: dict[str, str]) -> tuple[int, bool, bool]:
    """(collections while the block makes 50,000 container objects, collector on inside the
    block, collector on after it)."""
    import gc

    seen: list[str] = []

    def count(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(phase)

    gc.callbacks.append(count)
    try:
        with startup_heap.collector_paused(env):
            inside = gc.isenabled()
            kept = [[i] for i in range(50_000)]  # gen0's threshold is 700 new containers
            during = len(seen)
        return during, inside, gc.isenabled() and len(kept) == 50_000
    finally:
        gc.callbacks.remove(count)


def test_no_collection_runs_while_the_block_imports_and_the_collector_comes_back() -> None:
    collections, inside, after = _collections_during({})
    assert (collections, inside, after) == (0, False, True)


def test_off_the_collector_runs_through_the_block() -> None:
    collections, inside, after = _collections_during({"HPC_GRPO_STARTUP_HEAP": "0"})
    assert collections > 0 and inside and after


def test_the_collector_comes_back_after_an_import_that_raises_and_stays_off_if_it_was() -> None:
    import gc

    with pytest.raises(ImportError), startup_heap.collector_paused({}):
        import hpc_grpo_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert gc.isenabled()
    gc.disable()
    try:
        with startup_heap.collector_paused({}):
            pass
        assert not gc.isenabled()  # someone else's choice is left as it was
    finally:
        gc.enable()
