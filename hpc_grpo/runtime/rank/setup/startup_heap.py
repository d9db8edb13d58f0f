"""Start-up costs every rank of every attempt paid twice or more: the installed packages'
import-name map, and the garbage collector walking the imported libraries' objects.

Why: a restart's time to its first new step has a goal (issue #29: a warm 7B restart at most half
a cold one; both pay this). Rank 0's start-up profile of a warm 7B restart on 2 x H100 (session
41, docs/results/2026-11-27-7b-startup-profile-second-h100x2-session41.txt) showed:

* ``importlib.metadata.packages_distributions()`` called twice, 4.66 s under the profiler: once by
  transformers (``import_utils``, cached there) and once by TRL (``trl/import_utils.py``, at
  import). It reads every installed distribution's file list; Python does not cache it, and the
  installed set does not change while a rank starts.
* ``gc.collect()`` called 17 times, 4.77 s: vLLM collects around its memory profiling and CUDA
  graph capture while the engine starts, each a full walk of every tracked object (about 0.28 s
  with vLLM, TRL and DeepSpeed imported). vLLM itself freezes its heap once the engine has warmed
  up (``vllm.utils.gc_utils.freeze_gc_heap``: "reduces pause times of oldest generation
  collections"), but only after those collections.

What: ``share_package_map`` makes ``packages_distributions`` compute the map once per process and
hand each caller its own copy (a caller that edits its dict or lists cannot change another's).
``freeze_imported_heap`` moves the objects alive once the trainer's modules are imported (modules,
classes, functions: static for the rank's life) into the collector's permanent generation, so
the engine start's collections walk only what was made after it. One full collection first, as
vLLM's own ``freeze_gc_heap`` does (about 0.3 s, once): the imports' cyclic garbage is freed, not
frozen. Objects frozen stay freed by reference counting; only a reference cycle among them that
becomes garbage later waits for an unfreeze (vLLM's CUDA graph capture unfreezes and collects
once, then freezes again after warm-up; that stays as vLLM has it).
``collector_paused`` turns the cyclic collector off while a block imports libraries (torch,
DeepSpeed, TRL and what they pull in): every few hundred new objects the collector walks the
young generations, and now and then the whole growing heap of module objects, none of it garbage.
On this project's 2-core test machine, torch, DeepSpeed and TRL's GRPOConfig and GRPOTrainer
imported in 4.40 s with the collector running and 3.81 s with it paused in these blocks (0.866,
three alternating rounds of ``benchmarks/bench_rank_imports.py --deepspeed``; a second run of
four: 4.95 and 4.11 s, 0.831; 2026-11-28, no vLLM there). The blocks are imports only, so the
collector is off for seconds, never through the process group's wait or the inputs' load; what
the imports leave as cyclic garbage is freed by the next collection (the freeze's, at the
latest).
``HPC_GRPO_STARTUP_HEAP=0`` turns all three off (say, to compare).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping

ENV = "HPC_GRPO_STARTUP_HEAP"


def enabled(env: Mapping[str, str]) -> bool:
    """On unless the environment says ``HPC_GRPO_STARTUP_HEAP=0``."""
    return env.get(ENV, "1").strip() != "0"


def _copying(compute: Callable[[], Mapping[str, list[str]]]) -> Callable[[], dict[str, list[str]]]:
    """``compute`` run once; each call returns a fresh copy of its map."""
    once = functools.cache(compute)

    @functools.wraps(compute)
    def packages_distributions() -> dict[str, list[str]]:
        return {name: list(dists) for name, dists in once().items()}

    packages_distributions.hpc_grpo_shared = True  # type: ignore[attr-defined]
    return packages_distributions


def share_package_map(env: Mapping[str, str]) -> bool:
    """Make ``importlib.metadata.packages_distributions`` compute once per process; True when
    installed now (off, or installed already: False). Call before transformers or TRL is
    imported: TRL calls it at import."""
    current = importlib.metadata.packages_distributions
    if not enabled(env) or getattr(current, "hpc_grpo_shared", False):
        return False
    importlib.metadata.packages_distributions = _copying(current)  # type: ignore[assignment]
    return True


def freeze_imported_heap(env: Mapping[str, str]) -> int:
    """Move every object the collector tracks now into its permanent generation; returns how
    many are frozen (0 when off). Call once the trainer's modules are imported, before the
    engine starts. A full collection first, so that no garbage is frozen: one walk here saves
    the 17 the engine's start would make."""
    if not enabled(env):
        return 0
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextlib.contextmanager
def collector_paused(env: Mapping[str, str]) -> Iterator[None]:
    """The cyclic collector off for the block (a library import), then back as it was; nothing
    changes when off (``HPC_GRPO_STARTUP_HEAP=0``) or when the collector is off already."""
    if not enabled(env) or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
