"""Where the ranks load a staged model or dataset from: the pinned commit's snapshot folder.

`hpc-grpo stage` put the repository into the site's shared cache and run.json carries its
commit (model_load.commit, dataset.commit) and the cache (model_load.hf_home). Loading that
folder, not the hub id, pins every reader to the same commit: the trainer, the tokenizer, and
vLLM, which TRL hands only ``model.name_or_path`` (no revision). Offline, nothing else is asked.
"""

from __future__ import annotations

import os
import socket

from hpc_grpo.rundir.contract import RunRecord
from hpc_grpo.rundir.hub import hub_snapshot


class NotStagedError(RuntimeError):
    """The pinned snapshot is not on this node: the cache is not on a shared filesystem, or it
    was cleaned after submit."""


def _snapshot(run: RunRecord, kind: str, repo_id: str, commit: str, marker: str) -> str:
    path = hub_snapshot(run.model_load.hf_home, kind, repo_id, commit)
    if not os.path.exists(os.path.join(path, marker)):
        raise NotStagedError(
            f"{kind} {repo_id} commit {commit} is not in {run.model_load.hf_home} on node "
            f"{socket.gethostname()}: is hf_home on a filesystem every node mounts (and inside "
            "the container)? Stage it again with `hpc-grpo stage`")
    return path


def model_source(run: RunRecord) -> str:
    """The staged snapshot folder when run.json pins a commit, else the model as given."""
    load = run.model_load
    if load.commit and load.hf_home:
        return _snapshot(run, "model", run.model, load.commit, "config.json")
    return run.model


def dataset_name(run: RunRecord) -> str:
    """The staged dataset's snapshot folder (datasets loads a folder of data files offline, but
    not a hub name from the hub cache alone), else the dataset as given."""
    if run.dataset.commit and run.model_load.hf_home:
        return _snapshot(run, "dataset", run.dataset.name, run.dataset.commit, "")
    return run.dataset.name


def describe(run: RunRecord) -> str:
    """One log line: where the model and dataset load from, and whether the hub is off."""
    offline = os.environ.get("HF_HUB_OFFLINE", "") or "unset"
    return (f"model {model_source(run)}; dataset {dataset_name(run)}; HF_HOME "
            f"{os.environ.get('HF_HOME', 'unset')}; HF_HUB_OFFLINE {offline}")
