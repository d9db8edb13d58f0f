"""Models and datasets for compute nodes without internet: staged once on the login node.

``hpc-grpo stage NAME --site S`` downloads a hub repository with ``huggingface_hub`` into the
profile's shared cache (``<hf_home>/hub``: the layout ``HF_HOME`` gives ``HF_HUB_CACHE``, so
the ranks, with ``HF_HOME=<hf_home>``, read the very same files) and pins the revision to its
commit hash. A staging record is written beside the cache, in ``<hf_home>/hpc-grpo-staged/``,
only after every file arrived: the hub's own ``refs/<revision>`` is written before the files
are, so it cannot tell a finished download from an interrupted one. Anyone sharing the cache
sees the record. ``submit`` reads it (``check``): a staged model's commit and ``config.json``
go into the plan and run.json; a hub name that is not staged on a site whose nodes are offline
is refused with the exact command that stages it. Reads and writes files: not pure, so it stays
out of ``plan``; ``huggingface_hub`` is imported only to download (the ``stage`` extra).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from hpc_grpo.config.site import SiteProfile
from hpc_grpo.errors import UserError
from hpc_grpo.planner import arch_from_config
from hpc_grpo.planner.types import ModelRef
from hpc_grpo.rundir.hub import hub_snapshot

Kind = Literal["model", "dataset"]
RECORDS = "hpc-grpo-staged"  # beside hub/ in hf_home
DEFAULT_REVISION = "main"  # huggingface_hub's name for a repository's default branch
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# Files a training job never reads: other frameworks' weights and Meta's original checkpoints
# (which double the download of a Llama repository).
MODEL_IGNORE = ("original/*", "*.gguf", "*.onnx", "*.onnx_data", "*.h5", "*.msgpack", "*.ot",
                "*.tflite", "*.mlmodel")
Downloader = Callable[..., str]


@dataclass(frozen=True)
class Staged:
    """One staged repository: what was asked, the commit it resolved to, where the files are."""

    repo_id: str
    kind: str
    revision: str
    commit: str
    snapshot: Path


def is_hub_name(name: str) -> bool:
    """org/name and not a path that exists here."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def record_path(hf_home: str, kind: str, repo_id: str, revision: str) -> Path:
    rev = quote(revision or DEFAULT_REVISION, safe="")
    return Path(hf_home) / RECORDS / (f"{kind}s--" + repo_id.replace("/", "--") + f"@{rev}.json")


def find_staged(hf_home: str, kind: str, repo_id: str, revision: str) -> Staged | None:
    """The staging record for this revision, if its snapshot is still in the cache."""
    try:
        data = json.loads(record_path(hf_home, kind, repo_id, revision).read_text())
        commit = str(data["commit"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    snapshot = Path(hub_snapshot(hf_home, kind, repo_id, commit))
    needed = snapshot / "config.json" if kind == "model" else snapshot
    if not _COMMIT.match(commit) or not needed.exists():
        return None  # the cache was cleaned since: stage again
    return Staged(repo_id, kind, revision or DEFAULT_REVISION, commit, snapshot)


def stage_command(site_ref: str, name: str, revision: str, kind: str) -> str:
    """The exact command that stages ``name``: what the refusal and the warning print."""
    words = ["hpc-grpo", "stage", name, "--site", site_ref]
    if revision and revision != DEFAULT_REVISION:
        words += ["--revision", revision]
    if kind == "dataset":
        words.append("--dataset")
    return " ".join(shlex.quote(word) for word in words)


def _downloader() -> Downloader:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError("staging needs huggingface_hub, which is not installed", field="stage",
                        hint="pip install 'hpc-grpo[stage]' (or 'hpc-grpo[runtime]')") from None
    return snapshot_download  # type: ignore[no-any-return]


def stage(site: SiteProfile, name: str, *, revision: str = "", kind: Kind = "model",
          download: Downloader | None = None) -> Staged:
    """Download ``name`` at ``revision`` into the site's shared cache and record the commit."""
    hf_home = site.hf_home_path
    if not hf_home:
        raise UserError(f"site '{site.name}' has no hf_home to stage into", field="hf_home",
                        hint="set hf_home: in the profile to a folder every node mounts")
    if not _HUB_ID.match(name):
        raise UserError(f"'{name}' is not a hub id (org/name)", field="stage",
                        hint="a local folder needs no staging: give its path to --model")
    fetch = download or _downloader()
    try:
        path = fetch(name, repo_type=kind, revision=revision or None,
                     cache_dir=str(Path(hf_home) / "hub"),
                     ignore_patterns=list(MODEL_IGNORE) if kind == "model" else None)
    except Exception as exc:  # not found, gated, no network: the hub library's own words
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = "check the name and revision; gated repositories need HF_TOKEN"
        if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false", "no", "off"):
            hint = "HF_HUB_OFFLINE is set in this shell: unset it on the login node to download"
        raise UserError(f"could not download {kind} {name}: {type(exc).__name__}: {line}",
                        field="stage", hint=hint) from None
    snapshot = Path(path)
    commit = snapshot.name
    if not _COMMIT.match(commit) or snapshot.parent.name != "snapshots":
        raise UserError(f"the download of {name} did not land in the hub cache layout ({path})",
                        field="stage")
    if kind == "model" and not (snapshot / "config.json").exists():
        raise UserError(f"{name} has no config.json: not a transformers model", field="stage")
    _write_record(record_path(hf_home, kind, name, revision), {
        "repo_id": name, "kind": kind, "revision": revision or DEFAULT_REVISION, "commit": commit,
        "staged_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()),
    })
    return Staged(name, kind, revision or DEFAULT_REVISION, commit, snapshot)


def _write_record(path: Path, data: dict[str, Any]) -> None:
    """Atomically, so a reader on another node never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.chmod(tmp, 0o644)  # the cache is shared: others' submits read the record
    os.replace(tmp, path)


@dataclass(frozen=True)
class Missing:
    """A hub name the job needs that is not staged."""

    kind: str
    name: str
    revision: str

    def command(self, site_ref: str) -> str:
        return stage_command(site_ref, self.name, self.revision, self.kind)

    def what(self, site: SiteProfile) -> str:
        at = f" at revision {self.revision}" if self.revision not in ("", DEFAULT_REVISION) else ""
        where = f"in {site.hf_home_path}" if site.hf_home else f"(site '{site.name}' has no hf_home)"
        return f"{self.kind} {self.name}{at} is not staged {where}"

    def hint(self, site: SiteProfile, site_ref: str) -> str:
        run = f"run `{self.command(site_ref)}` on the login node"
        if site.hf_home:
            return run
        return f"set hf_home: in the profile to a folder every node mounts, then {run}"

    def refusal(self, site: SiteProfile, site_ref: str) -> UserError:
        """submit on a site whose nodes are offline: refused before anything is queued."""
        return UserError(f"{self.what(site)} and the nodes of site '{site.name}' have no internet",
                         field=self.kind, hint=self.hint(site, site_ref))

    def warning(self, site: SiteProfile, site_ref: str) -> str:
        """plan and render (which submit nothing), and a site that does not say."""
        if site.nodes_offline is True:
            tail = "submit will refuse it"
        else:
            tail = (f"site '{site.name}' does not say whether its nodes reach the internet (set "
                    "nodes_online in the profile)")
        return f"{self.what(site)}: {tail}; {self.hint(site, site_ref)}"


@dataclass(frozen=True)
class Staging:
    """What ``check`` found: the model with its pinned commit and staged architecture, the
    staged dataset's commit, and the hub names that are not staged."""

    model: ModelRef
    dataset_commit: str
    missing: tuple[Missing, ...]

    def problems(self, site: SiteProfile, site_ref: str) -> tuple[tuple[UserError, ...],
                                                                  tuple[str, ...]]:
        """(what submit refuses, what plan/render/submit warn about): refused where the nodes
        are offline; a warning wherever they may be (plan and render submit nothing)."""
        offline = site.nodes_offline
        refused = tuple(m.refusal(site, site_ref) for m in self.missing) if offline else ()
        warnings = tuple(m.warning(site, site_ref) for m in self.missing) if offline is not False else ()
        return refused, warnings


def check(site: SiteProfile, model: ModelRef, revision: str, dataset: str) -> Staging:
    """Look up the job's hub model and hub dataset in the site's staged cache."""
    hf_home = site.hf_home_path
    model = replace(model, hf_home=hf_home)
    missing: list[Missing] = []
    if not model.local and is_hub_name(model.source):
        staged = find_staged(hf_home, "model", model.source, revision) if hf_home else None
        if staged is None:
            missing.append(Missing("model", model.source, revision))
        else:
            model = replace(model, commit=staged.commit,
                            arch=_staged_arch(staged.snapshot, model) or model.arch)
    dataset_commit = ""
    if is_hub_name(dataset):
        found = find_staged(hf_home, "dataset", dataset, "") if hf_home else None
        if found is None:
            missing.append(Missing("dataset", dataset, ""))
        else:
            dataset_commit = found.commit
    return Staging(model, dataset_commit, tuple(missing))


def _staged_arch(snapshot: Path, model: ModelRef) -> Any:
    """The architecture from the staged config.json: any dense decoder, not only the catalogue's."""
    try:
        return arch_from_config(json.loads((snapshot / "config.json").read_text()), model.source)
    except (OSError, ValueError, UserError):
        return None  # MoE or unreadable: the planner says the architecture is unknown
