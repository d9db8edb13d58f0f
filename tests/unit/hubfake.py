"""A Hugging Face hub cache laid out as huggingface_hub lays it out, and a loopback hub server.

No hub is reachable here. ``lay_out`` writes ``<hub>/models--ORG--NAME/{blobs,refs,snapshots}``
with snapshot files as relative symlinks to blobs named by their etag (the git blob sha1 for
regular files, the sha256 for LFS files), exactly as ``hf_hub_download`` leaves them.
``FakeHub`` answers the four requests ``snapshot_download`` makes (repo info at a revision, the
recursive tree at the commit, HEAD and GET of each file at ``/resolve/<commit>/``) on
127.0.0.1 only, so the stage command's real download path runs against it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".parquet")


def is_lfs(name: str) -> bool:
    return name.endswith(LFS_SUFFIXES)


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def etag(name: str, data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() if is_lfs(name) else git_oid(data)


def commit_of(files: Mapping[str, bytes], salt: str = "") -> str:
    digest = hashlib.sha1(salt.encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()


def read_folder(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def lay_out(hub: Path, kind: str, repo_id: str, files: Mapping[str, bytes], commit: str,
            ref: str = "main") -> Path:
    """Write one revision of a repository into a hub cache; returns its snapshot folder."""
    repo = hub / (f"{kind}s--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snapshot = repo / "snapshots" / commit
    for name, data in files.items():
        blob = repo / "blobs" / etag(name, data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


@dataclass
class Repo:
    files: dict[str, bytes]
    refs: dict[str, str] = field(default_factory=dict)  # revision -> commit


class FakeHub:
    """Serve ``repos[(kind, repo_id)]`` on a loopback port; every request path is recorded."""

    def __init__(self, repos: Mapping[tuple[str, str], Repo]) -> None:
        self.repos = dict(repos)
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _find(self, kind: str, repo_id: str, revision: str) -> tuple[Repo, str] | None:
        repo = self.repos.get((kind, repo_id))
        if repo is None:
            return None
        commit = repo.refs.get(revision, revision if revision in repo.refs.values() else "")
        return (repo, commit) if commit else None

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        self.requests.append(f"{handler.command} {path}")
        status, headers, payload = self._route(path)
        handler.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(payload))}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _route(self, path: str) -> tuple[int, dict[str, str], bytes]:
        not_found = (404, {"X-Error-Code": "RepoNotFound"}, b'{"error":"not found"}')
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            kind = parts[1].rstrip("s")
            found = self._find(kind, f"{parts[2]}/{parts[3]}", parts[5])
            if found is None:
                return not_found
            repo, commit = found
            if parts[4] == "revision":
                info = {"id": f"{parts[2]}/{parts[3]}", "sha": commit,
                        "siblings": [{"rfilename": name} for name in sorted(repo.files)]}
                return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()
            tree = [self._entry(name, data) for name, data in sorted(repo.files.items())]
            return 200, {"Content-Type": "application/json"}, json.dumps(tree).encode()
        kind = "dataset" if parts[0] == "datasets" else "model"
        parts = parts[1:] if kind == "dataset" else parts
        if len(parts) >= 5 and parts[2] == "resolve":
            found = self._find(kind, f"{parts[0]}/{parts[1]}", parts[3])
            name = "/".join(parts[4:])
            if found is None or name not in found[0].files:
                return not_found
            data = found[0].files[name]
            return 200, {"X-Repo-Commit": found[1], "ETag": f'"{etag(name, data)}"'}, data
        return not_found

    @staticmethod
    def _entry(name: str, data: bytes) -> dict[str, object]:
        entry: dict[str, object] = {"type": "file", "path": name, "size": len(data),
                                    "oid": git_oid(data)}
        if is_lfs(name):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 130}
        return entry


def iter_links(snapshot: Path) -> Iterator[Path]:
    return (p for p in snapshot.rglob("*") if p.is_symlink())
