"""The ranks' Python bytecode, compiled once per output root instead of at every start, where the
installed packages carry none. Stdlib only, like the node task that uses it.

Why: Python reads a module's compiled bytecode from ``__pycache__`` beside its source, and
compiles the source when there is none. pip writes it at install time, but ``uv pip install``
does not (unless ``--compile-bytecode``), nor ``pip install --no-compile``; a read-only
container image or software module cannot get it later, and ``PYTHONDONTWRITEBYTECODE=1``
(common in container images) keeps Python from writing it. Then every rank of every attempt
compiles vLLM, TRL and DeepSpeed again. Measured on 2 x H100 (session 41, the GPU recipe's
packages: pip ``--no-compile``, PYTHONDONTWRITEBYTECODE=1): a 7B start with a warm compile cache,
rank 0 under cProfile, compiled 3,789 modules from source (11.9 s of 78.8 s), in the start-up a
warm and a cold restart share (issue #29); a rank's imports (DeepSpeed, vLLM, TRL's trainer)
took 26.9-28.3 s as the ranks ran, 14.0-15.0 s from this cache (its first fill: 39.6 s, once;
docs/results/2026-11-27-bytecode-cache-imports-h100x2-session41.json).

What: where one of ``PACKAGES`` has no bytecode beside its ``__init__.py``, the ranks get
``PYTHONPYCACHEPREFIX`` = the output root's ``BYTECODE_CACHE`` (beside the compile caches,
environment.py), and ``PYTHONDONTWRITEBYTECODE`` emptied, so the first start writes there and
every later attempt and run of that root reads it. Nothing is written beside any source: what
``PYTHONDONTWRITEBYTECODE`` is there to prevent. Python then ignores the ``__pycache__`` folders
of the packages that had them and compiles those once into the prefix as well (a one-time cost
per output root). A ``PYTHONPYCACHEPREFIX`` the user or site set wins; ``HPC_GRPO_BYTECODE_CACHE=0``
turns this off; packages that all carry bytecode leave the environment as it was.

Each installed set gets its own folder under ``BYTECODE_CACHE``, named by ``environment_key``: a
digest of the interpreter's version and every installed distribution's name, version and RECORD
(the sha256 of each of its files). Python takes a cached file as current when the source's mtime
and size match what it recorded, and images built reproducibly give every file the same mtime:
a package replaced in place by a release whose changed files keep their sizes (a version string
"0.26.0" -> "0.26.1") would otherwise run the old release's bytecode. Folders of earlier sets are
left in place (a run still on the old set may be using one); delete them when no run is.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ENV = "HPC_GRPO_BYTECODE_CACHE"
BYTECODE_CACHE = ".bytecode-cache"  # in the output root
# The ranks' largest imports (vLLM alone is about 2,000 modules); each is looked at without
# being imported.
PACKAGES = ("vllm", "trl", "deepspeed", "transformers", "torch", "accelerate", "peft")


def _init_of(name: str) -> str | None:
    try:  # best effort: a third-party finder's failure never ends the attempt
        spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001
        return None
    origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") else None


def without_bytecode(packages: Sequence[str] = PACKAGES,
                     init_of: Callable[[str], str | None] = _init_of,
                     exists: Callable[[str], bool] = lambda path: Path(path).exists()) -> list[str]:
    """The installed ones among ``packages`` whose ``__init__.py`` has no bytecode beside it
    (``importlib.util.cache_from_source``); packages not installed are not listed."""
    missing = []
    for name in packages:
        init = init_of(name)
        if init is not None and not exists(importlib.util.cache_from_source(init)):
            missing.append(name)
    return missing


def cannot_write(missing: Sequence[str], env: Mapping[str, str],
                 init_of: Callable[[str], str | None] = _init_of,
                 writable: Callable[[str], bool] = lambda d: os.access(d, os.W_OK)) -> list[str]:
    """Those of ``missing`` Python will not compile beside the source either: all of them under
    ``PYTHONDONTWRITEBYTECODE``, else those whose folder is read-only. A writable install
    without bytecode gets its ``__pycache__`` from the first rank that imports it."""
    if env.get("PYTHONDONTWRITEBYTECODE"):
        return list(missing)
    out = []
    for name in missing:
        init = init_of(name)
        if init is not None and not writable(str(Path(init).parent)):
            out.append(name)
    return out


def _row(dist: importlib.metadata.Distribution) -> str:
    """One distribution's METADATA and RECORD text, raw (nothing parsed, so a malformed one
    still counts); a file that cannot be read (not UTF-8, an I/O error) counts by its folder's
    name, so the distribution's presence still changes the key."""
    texts = []
    for name in ("METADATA", "PKG-INFO", "RECORD"):
        try:
            texts.append(dist.read_text(name) or "")
        except Exception:  # noqa: BLE001  # best effort: never a failed attempt for this
            texts.append(f"unreadable {name} in {getattr(dist, '_path', '?')}")
    return "\0".join(texts)


def environment_key(path: Sequence[str] | None = None) -> str:
    """16 hex digits naming the interpreter and the distributions installed on ``path`` (default
    ``sys.path``): each one's METADATA (name, version) and RECORD (every file's sha256), raw, in
    a stable order. About 0.1-0.2 s for a hundred distributions, once per attempt and only where
    the cache is used. Distributions without a RECORD (some conda or system packages) count by
    their metadata alone, and an editable install or a checkout on PYTHONPATH not at all."""
    rows = [_row(dist) for dist in
            importlib.metadata.distributions(path=list(sys.path if path is None else path))]
    digest = hashlib.sha256(sys.version.encode())
    for row in sorted(rows):
        digest.update(b"\1" + row.encode(errors="replace"))
    return digest.hexdigest()[:16]


def _left_as_it_is(env: Mapping[str, str]) -> bool:
    """The switch is off, or the user or site chose a prefix: the ranks' bytecode is theirs."""
    return env.get(ENV, "1") == "0" or bool(env.get("PYTHONPYCACHEPREFIX"))


def bytecode_env(output_root: Path, env: Mapping[str, str], missing: Sequence[str],
                 key: Callable[[], str] = environment_key) -> dict[str, str]:
    """What the ranks' environment gains: the shared bytecode cache of this installed set
    (``key``, called only where the cache is used) where ``missing`` names a package without
    bytecode, else nothing (see the module docstring)."""
    if not missing or _left_as_it_is(env):
        return {}
    try:  # a finder that raises: no cache (the ranks compile as before), never a failed attempt
        folder = key()
    except Exception:  # noqa: BLE001
        return {}
    return {"PYTHONPYCACHEPREFIX": str(output_root / BYTECODE_CACHE / folder),
            "PYTHONDONTWRITEBYTECODE": ""}  # empty: Python writes (it reads non-empty as set)


def ranks_env(output_root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``bytecode_env`` for the ranks of an output root, each package looked up once (and none
    when the switch is off or a prefix is set already)."""
    if _left_as_it_is(env):
        return {}
    inits = {name: _init_of(name) for name in PACKAGES}
    return bytecode_env(output_root, env,
                        cannot_write(without_bytecode(PACKAGES, inits.get), env, inits.get))
