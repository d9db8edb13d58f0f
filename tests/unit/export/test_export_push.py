"""`hpc-grpo export --push ORG/NAME` against a local stand-in of the hub's HTTP API.

No hub is reachable here: tests/unit/hubfake.py's ``UploadHub`` answers, on 127.0.0.1 and
through ``HF_ENDPOINT``, the requests the installed huggingface_hub's real ``create_repo`` and
``upload_folder`` make on its HTTP path (``HF_HUB_DISABLE_XET=1``: repo creation, preupload,
the LFS batch and basic PUT, the NDJSON commit). The Xet transfer the client takes by default
where hf_xet is installed is not covered. The export child is a stand-in (the write tests'
script); the push child is the real runtime module in this Python.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from hpc_grpo.export import commands, push, write
from hpc_grpo.rundir import ledgers
from hpc_grpo.runs import after_training
from tests.unit.export import fakes
from tests.unit.export.export_fake import FAKE
from tests.unit.hubfake import UploadHub

TOKEN = "hf_standin_0123456789abcdefSECRET"
# The export's stand-in child; the push module runs in this Python as it is.
DISPATCH = """#!{python}
import os, sys
if sys.argv[2] == "hpc_grpo.runtime.posttrain.hub_upload":
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
""" + FAKE.split("\n", 1)[1]


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    path = tmp_path / "fakepython"
    path.write_text(DISPATCH.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    with UploadHub(TOKEN) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no login file of this machine
        yield server


def _hashes(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def _folder(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _nowhere(token: str, *folders: Path) -> None:
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path


def _run(tmp_path: Path) -> Path:
    run = fakes.run_dir(tmp_path)
    fakes.checkpoint(run, 4)
    (run / "reward_curve.png").write_bytes(bytes(range(256)) * 64)
    return run


def test_export_then_push_uploads_the_checked_folder(tmp_path: Path, fake_python: str,
                                                     hub: UploadHub) -> None:
    run = _run(tmp_path)
    lines: list[str] = []
    done = commands.export(str(run), python=fake_python, announce=lines.append,
                           push="my-org/tiny-grpo", private=True)
    target = run / "export" / "step-4"
    assert done.error == "" and done.pushed is not None and done.pushed.error == ""
    assert _hashes(hub.repos["my-org/tiny-grpo"]) == _hashes(_folder(target))
    assert {"README.md", "model.safetensors", "reward_curve.png",
            "config.json"} <= set(hub.repos["my-org/tiny-grpo"])
    assert hub.private["my-org/tiny-grpo"] == "private"
    assert hub.commits[-1]["summary"] == "hpc-grpo export of run tiny-0001, step 4"
    assert "checked: max |log p(export) - log p(checkpoint)| = 0.001" in str(hub.commits[-1]["description"])
    assert hub.blobs  # model.safetensors went through the LFS batch and PUT
    api_requests = [r for r in hub.requests if not r.path.startswith(UploadHub.OPEN)]
    assert api_requests and all(r.authorization == f"Bearer {TOKEN}" for r in api_requests)
    assert {r.path for r in hub.requests} >= {"/api/repos/create",
                                              "/api/models/my-org/tiny-grpo/preupload/main",
                                              "/my-org/tiny-grpo.git/info/lfs/objects/batch",
                                              "/api/models/my-org/tiny-grpo/commit/main"}
    entry = ledgers.newest_push(run)
    assert entry is not None and entry.repo_id == "my-org/tiny-grpo" and entry.step == 4
    assert entry.commit == done.pushed.commit and after_training.push_line(entry).startswith(
        "pushed step 4 to my-org/tiny-grpo (")
    assert lines[-1] == f"pushing {target} to my-org/tiny-grpo"
    _nowhere(TOKEN, run, target)


@pytest.mark.parametrize("status, part", [(401, "/api/repos/create"), (409, "/commit/")])
def test_a_refused_push_is_one_line_and_leaves_the_export(tmp_path: Path, fake_python: str,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         hub: UploadHub, status: int, part: str) -> None:
    run = _run(tmp_path)
    hub.refuse = (status, part)
    done = commands.export(str(run), python=fake_python, push="my-org/tiny-grpo")
    target = run / "export" / "step-4"
    assert done.error == "" and done.pushed is not None
    error = done.pushed.error
    assert "\n" not in error and error.startswith("push to my-org/tiny-grpo failed: ")
    assert f"(HTTP {status})" in error and error.endswith(f"the export stays at {target}")
    assert TOKEN not in error
    assert (target / "model.safetensors").is_file() and ledgers.newest_export(run) is not None
    assert ledgers.newest_push(run) is None
    _nowhere(TOKEN, run)
    # the same command again, once the hub takes it: the finished export is pushed as it is
    hub.refuse = None
    again = commands.export(str(run), python=fake_python, push="my-org/tiny-grpo")
    assert again.reused and again.pushed is not None and again.pushed.error == ""
    assert _hashes(hub.repos["my-org/tiny-grpo"]) == _hashes(_folder(target))
    assert len(ledgers.exports(run)) == 1


def test_the_cli_prints_the_refusal_in_one_line_and_exits_1(tmp_path: Path, fake_python: str,
                                                           hub: UploadHub,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    write.export(run, python=fake_python)  # the CLI pushes this one (its child: this Python)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    result = CliRunner().invoke(main, ["export", str(run), "--push", "my-org/tiny-grpo"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: push to my-org/tiny-grpo failed: the token was refused (HTTP 401): "
                      f"Invalid credentials in Authorization header; the export stays at "
                      f"{run / 'export' / 'step-4'}"]
    assert "hf_wrong" not in result.output


def test_no_token_and_bad_names_are_refused_before_anything_is_sent(
        tmp_path: Path, fake_python: str, hub: UploadHub, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    for bad in ("org//x", "a/b/c", "org/", "-x/y", "org/na me"):
        with pytest.raises(UserError, match="not a hub repository name"):
            commands.export(str(run), python=fake_python, push=bad)
    assert not (run / "export").exists()
    monkeypatch.delenv("HF_TOKEN")
    done = commands.export(str(run), python=fake_python, push="my-org/tiny-grpo")
    assert done.pushed is not None and "no hub token: set HF_TOKEN" in done.pushed.error
    assert hub.requests == []


def test_the_commit_names_the_run_and_step(tmp_path: Path, fake_python: str) -> None:
    run = _run(tmp_path)
    done = write.export(run, python=fake_python)
    summary, description = push.commit_text(done.plan, done.check)
    assert summary == "hpc-grpo export of run tiny-0001, step 4"
    assert description.startswith("full weights (float32) of checkpoint-4 (full layout).")
