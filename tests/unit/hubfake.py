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


@dataclass
class Upload:
    """What one request to the upload stand-in carried (never the token itself in a message)."""

    method: str
    path: str
    authorization: str


class UploadHub:
    """The hub's upload side on a loopback port: the requests ``HfApi.create_repo`` and
    ``HfApi.upload_folder`` make on huggingface_hub's HTTP path (``HF_HUB_DISABLE_XET=1``; the
    Xet storage protocol that client takes by default where hf_xet is installed is not spoken).

    ``POST /api/repos/create``; ``GET /api/models/ORG/NAME`` (create_repo's look when refused);
    ``POST /api/validate-yaml`` (a README.md); ``POST /api/models/ORG/NAME/preupload/REV`` (LFS
    for LFS_SUFFIXES, regular otherwise); ``POST /ORG/NAME.git/info/lfs/objects/batch`` (basic
    transfer, one ``PUT /lfs-upload/OID`` each, checked against the sha256) and
    ``POST /api/models/ORG/NAME/commit/REV`` (NDJSON: header, file in base64, lfsFile by oid).
    ``refuse`` = (status, path part): that status for every request whose path holds the part.
    """

    # Asked without a token: the storage's PUT (a signed URL on the hub), and huggingface_hub 2.x's
    # once-a-day fetch of an "agent harness" list for its user agent (not served: 404).
    OPEN = ("/lfs-upload/", "/api/agent-harnesses")
    USER = "standin-user"  # the token's user: a repository named without a namespace is theirs

    def __init__(self, token: str, refuse: tuple[int, str] | None = None) -> None:
        self.token = token
        self.refuse = refuse
        self.repos: dict[str, dict[str, bytes]] = {}  # repo id -> committed files
        self.private: dict[str, object] = {}
        self.commits: list[dict[str, object]] = []  # each commit's header
        self.blobs: dict[str, bytes] = {}  # LFS uploads by sha256
        self.requests: list[Upload] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                hub._serve(self)

            def do_POST(self) -> None:  # noqa: N802
                hub._serve(self)

            def do_PUT(self) -> None:  # noqa: N802
                hub._serve(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> UploadHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _body(handler: BaseHTTPRequestHandler) -> bytes:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    handler.rfile.readline()
                    return out
                out += handler.rfile.read(size)
                handler.rfile.readline()
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        path = unquote(urlparse(handler.path).path)
        body = self._body(handler)
        auth = handler.headers.get("Authorization", "")
        self.requests.append(Upload(handler.command, path, auth))
        if self.refuse and self.refuse[1] in path:
            status, payload = self.refuse[0], {"error": "refused by the stand-in"}
        elif auth != f"Bearer {self.token}" and not path.startswith(self.OPEN):
            status, payload = 401, {"error": "Invalid credentials in Authorization header"}
        else:
            status, payload = self._route(handler.command, path, body)
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, body: bytes) -> tuple[int, object]:
        parts = path.strip("/").split("/")
        if path == "/api/repos/create":
            req = json.loads(body)
            repo_id = f"{req['organization'] or self.USER}/{req['name']}"
            if repo_id in self.repos:
                return 409, {"error": "You already created this model repo",
                             "url": f"{self.url}/{repo_id}"}
            self.repos[repo_id] = {}
            self.private[repo_id] = req.get("visibility", req.get("private"))
            return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}
        if path == "/api/validate-yaml":
            return 200, {"errors": [], "warnings": []}
        if path.startswith("/lfs-upload/"):
            oid = parts[-1]
            if hashlib.sha256(body).hexdigest() != oid:
                return 400, {"error": "sha256 mismatch"}
            self.blobs[oid] = body
            return 200, {}
        if path.endswith(".git/info/lfs/objects/batch"):
            objects = json.loads(body)["objects"]
            return 200, {"transfer": "basic", "objects": [
                {"oid": o["oid"], "size": o["size"],
                 "actions": {"upload": {"href": f"{self.url}/lfs-upload/{o['oid']}"}}}
                for o in objects]}
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = f"{parts[2]}/{parts[3]}"
            if repo_id not in self.repos:
                return 404, {"error": "Repository not found"}
            if len(parts) == 4 and method == "GET":
                return 200, {"id": repo_id, "sha": "0" * 40, "siblings": []}
            if len(parts) >= 6 and parts[4] == "preupload":
                files = json.loads(body)["files"]
                return 200, {"files": [{"path": f["path"], "shouldIgnore": False,
                                        "uploadMode": "lfs" if is_lfs(f["path"]) else "regular"}
                                       for f in files]}
            if len(parts) >= 6 and parts[4] == "commit":
                return self._commit(repo_id, body)
        return 404, {"error": f"the stand-in does not serve {method} {path}"}

    def _commit(self, repo_id: str, body: bytes) -> tuple[int, object]:
        import base64

        files = dict(self.repos[repo_id])
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                self.commits.append(value)
            elif item["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                if value["oid"] not in self.blobs:
                    return 422, {"error": f"LFS object {value['oid']} was never uploaded"}
                files[value["path"]] = self.blobs[value["oid"]]
        self.repos[repo_id] = files
        oid = commit_of(files)
        return 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid,
                     "pullRequestUrl": None}
