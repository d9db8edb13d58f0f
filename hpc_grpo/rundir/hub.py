"""run.json's "hub" block: a recipe's ``push_to_hub`` as the step after training (issue #28).

Standard library only, like the rest of the run directory's room; contract.py imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HubBlock:
    """A recipe's ``push_to_hub``/``hub_model_id``: the checked export of the run's last
    checkpoint goes to ``repo_id``. ``on_node``: the site's nodes reach the hub, so rank 0's node
    task exports and pushes when training is done; otherwise `status` shows the push pending
    with the login-node command (``push_command``)."""

    repo_id: str
    private: bool | None = None  # hub_private_repo; None: the hub's default
    on_node: bool = False


def visibility(private: bool | None) -> list[str]:
    """`hpc-grpo export`'s flag of a pushed repository's visibility (none: the hub's default)."""
    return [] if private is None else ["--private" if private else "--public"]


def push_args(repo_id: str, private: bool | None) -> list[str]:
    """`hpc-grpo export`'s flags of a push to ``repo_id``."""
    return ["--push", repo_id, *visibility(private)]


def export_argv(python: str, run: str, *flags: str) -> list[str]:
    """`hpc-grpo export RUN --here FLAGS` as a job or a node task runs it (this ``python``): it
    runs where it was started, never a job of its own from there."""
    return [python, "-m", "hpc_grpo.cli", "export", run, "--here", *flags]


def push_command(run_id: str, hub: HubBlock) -> str:
    """The one command that exports a run's last checkpoint and pushes it (login node or node)."""
    return " ".join(["hpc-grpo", "export", run_id, *push_args(hub.repo_id, hub.private)])


def hub_snapshot(hf_home: str, kind: str, repo_id: str, commit: str) -> str:
    """Where huggingface_hub keeps one commit of a repository under HF_HOME (kind "model" or
    "dataset"): `hpc-grpo stage` puts it there and the ranks load it from there."""
    folder = f"{kind}s--" + repo_id.replace("/", "--")
    return os.path.join(hf_home, "hub", folder, "snapshots", commit)
