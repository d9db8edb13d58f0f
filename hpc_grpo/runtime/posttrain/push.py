"""Upload an exported model folder to the Hugging Face hub: ``create_repo`` then ``upload_folder``.

Run as a child (``python -m hpc_grpo.runtime.posttrain.push ANSWER`` with the request on stdin)
by `hpc-grpo export --push` on the login node and by the rank-0 node task at the end of a run
whose recipe asked for ``push_to_hub`` on a site whose nodes are online. No torch: only
``huggingface_hub`` (the ``hub`` extra).

The token is huggingface_hub's own: ``HF_TOKEN`` in the environment, else the file its login
wrote. It never passes through the request, the answer or any file of ours, and no message
here prints it. Request: ``{"folder", "repo_id", "private", "revision", "commit_message",
"commit_description"}``; answer: ``{"ok": true, "url", "commit", "repo_url"}`` or ``{"ok":
false, "error": one line, "status": the HTTP status or 0}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hpc_grpo.runtime.child_answer import serve


def _refusal(exc: Exception) -> tuple[str, int]:
    """One line for an HTTP error of the hub, with its status; never the request's headers."""
    response = getattr(exc, "response", None)
    status = int(getattr(response, "status_code", 0) or 0)
    server = str(getattr(exc, "server_message", "") or "").strip().splitlines()
    reason = server[0] if server else str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    what = {401: "the token was refused", 403: "the token may not write to this repository",
            404: "no such repository or revision", 409: "the repository refused the commit "
            "(a conflicting change)"}.get(status, "the hub answered with an error")
    return f"{what} (HTTP {status}): {reason}" if status else f"{what}: {reason}", status


def push(request: dict[str, Any]) -> dict[str, Any]:
    try:
        from huggingface_hub import HfApi, get_token
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:
        return {"ok": False, "status": 0,
                "error": "huggingface_hub is not installed: pip install 'hpc-grpo[hub]'"}
    if not get_token():
        return {"ok": False, "status": 0, "error": "no hub token: set HF_TOKEN or log in once "
                "with `hf auth login` (the token is never written by hpc-grpo)"}
    folder = Path(str(request["folder"]))
    repo_id = str(request["repo_id"])
    revision = request.get("revision") or None
    api = HfApi()
    try:
        repo_url = api.create_repo(repo_id, repo_type="model", private=request.get("private"),
                                   exist_ok=True)
        repo_id = getattr(repo_url, "repo_id", None) or repo_id  # NAME alone: under the user
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                                 revision=revision,
                                 commit_message=str(request.get("commit_message") or ""),
                                 commit_description=str(request.get("commit_description") or ""))
    except HfHubHTTPError as exc:
        error, status = _refusal(exc)
        return {"ok": False, "status": status, "error": error}
    except Exception as exc:  # no connection (httpx's errors), a malformed answer
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {"ok": False, "status": 0, "error": f"the upload failed: {line}"}
    return {"ok": True, "url": str(getattr(info, "commit_url", "") or ""),
            "commit": str(getattr(info, "oid", "") or ""), "repo_url": str(repo_url)}


def main(argv: list[str]) -> int:
    """`python -m hpc_grpo.runtime.posttrain.push ANSWER.json < request.json`
    (runtime/child_answer.py)."""
    return serve("hpc_grpo.runtime.posttrain.push", push, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
