"""Staging hub models and datasets for offline compute nodes (#14), without a hub.

The cache is built as huggingface_hub builds it (hubfake.lay_out) from the project's own tiny
model, and huggingface_hub itself is asked to read it. The stage command's download runs the
real ``snapshot_download`` against a loopback server speaking the hub's endpoints (hubfake.FakeHub).
The profile is unlike the sandbox's: partition ``batch``, GPUs, its own cache, nodes offline.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_grpo import api
from hpc_grpo.config.site import find_site
from hpc_grpo.errors import UserError
from hpc_grpo.preflight import stage
from hpc_grpo.rundir.contract import ModelBlock, RunRecord, ServerBlock, VllmBlock
from hpc_grpo.runtime.node.environment import child_env
from hpc_grpo.runtime.node.vllm_server import server_argv
from hpc_grpo.runtime.shared import staged
from tests.paths import REPO
from tests.unit.hubfake import commit_of, lay_out, read_folder
from tests.unit.preflight.stage_helpers import DATASET, MODEL, ROWS, _hub, _profile
from tests.unit.preflight.stage_helpers import tiny_files as tiny_files  # noqa: F401, F811 (a fixture)
from tests.unit.slurmfake import FakeSlurm


def test_the_laid_out_cache_is_what_huggingface_hub_reads(tiny_files: dict[str, bytes],
                                                          tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache

    commit = commit_of(tiny_files)
    snapshot = lay_out(tmp_path / "hub", "model", MODEL, tiny_files, commit)
    (repo,) = scan_cache_dir(tmp_path / "hub").repos
    (revision,) = repo.revisions
    assert (repo.repo_id, revision.commit_hash, revision.refs) == (MODEL, commit, {"main"})
    assert revision.nb_files == len(tiny_files) and not scan_cache_dir(tmp_path / "hub").warnings
    assert try_to_load_from_cache(MODEL, "config.json", cache_dir=tmp_path / "hub") == \
        str(snapshot / "config.json")
    assert snapshot_download(MODEL, cache_dir=tmp_path / "hub", local_files_only=True) == \
        str(snapshot)


def test_stage_downloads_through_the_hub_endpoints(tiny_files: dict[str, bytes], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI in a fresh process, HF_ENDPOINT at the loopback hub: the real download path."""
    cache = _profile(tmp_path, monkeypatch)
    env = {**os.environ, "HF_ENDPOINT": "", "HF_HUB_DISABLE_XET": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    with _hub(tiny_files) as hub:
        env["HF_ENDPOINT"] = hub.url
        proc = subprocess.run([sys.executable, "-m", "hpc_grpo.cli", "stage", MODEL,
                               "--site", "lab"], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert any(r.startswith("GET /api/models/tiny-org/tiny-grpo/revision/main")
                   for r in hub.requests)
    found = stage.find_staged(str(cache), "model", MODEL, "")
    assert found is not None and found.commit == commit_of(tiny_files)
    assert f"commit {found.commit}" in proc.stdout
    assert read_folder(found.snapshot) == tiny_files  # every byte, through symlinks to blobs
    assert all((found.snapshot / name).is_symlink() for name in tiny_files)


def test_stage_pins_a_tag_and_a_dataset_and_says_what_is_missing(
        tiny_files: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import scan_cache_dir, snapshot_download

    cache = _profile(tmp_path, monkeypatch)
    site = find_site("lab")
    with _hub(tiny_files) as hub:
        fetch = functools.partial(snapshot_download, endpoint=hub.url)
        main_ = stage.stage(site, "tiny-org/tagged", download=fetch)
        v2 = stage.stage(site, "tiny-org/tagged", revision="v2", download=fetch)
        data = stage.stage(site, DATASET, kind="dataset", download=fetch)
        with pytest.raises(UserError, match="could not download model tiny-org/nope: Repository"):
            stage.stage(site, "tiny-org/nope", download=fetch)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a login shell that has it: said so
        with pytest.raises(UserError) as exc:
            stage.stage(site, "tiny-org/nope", download=lambda *a, **k: fetch(*a, **k,
                                                                              local_files_only=True))
        assert "HF_HUB_OFFLINE is set in this shell" in exc.value.hint
    assert main_.commit != v2.commit and v2.revision == "v2"
    assert stage.find_staged(str(cache), "model", "tiny-org/tagged", "v2") == v2
    assert stage.find_staged(str(cache), "model", "tiny-org/tagged", "main") == main_
    repos = {r.repo_id: r for r in scan_cache_dir(cache / "hub").repos}
    assert {rev.commit_hash for rev in repos["tiny-org/tagged"].revisions} == {main_.commit,
                                                                               v2.commit}
    assert (data.snapshot / "data" / "train.jsonl").read_bytes() == ROWS
    assert repos[DATASET].repo_type == "dataset"


def test_an_interrupted_or_cleaned_stage_is_not_staged(tiny_files: dict[str, bytes],
                                                       tmp_path: Path) -> None:
    """refs/main is written before the files: only the record written after them counts."""
    hf_home = str(tmp_path)
    snapshot = lay_out(tmp_path / "hub", "model", MODEL, tiny_files, commit_of(tiny_files))
    assert stage.find_staged(hf_home, "model", MODEL, "") is None  # no record: interrupted
    site = _site_obj(hf_home)
    done = stage.stage(site, MODEL, download=lambda *a, **k: str(snapshot))  # the seam
    assert stage.find_staged(hf_home, "model", MODEL, "main") == done
    (snapshot / "config.json").unlink()  # the cache was cleaned since
    assert stage.find_staged(hf_home, "model", MODEL, "") is None


def _site_obj(hf_home: str, **keys: object):  # type: ignore[no-untyped-def]
    from hpc_grpo.config.site import SiteProfile

    return SiteProfile(name="lab", hf_home=hf_home, **keys)  # type: ignore[arg-type]


def test_a_site_that_does_not_say_warns_and_an_online_one_is_quiet(
        fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, name="unsaid", nodes_online="UNSET")
    _profile(tmp_path, monkeypatch, name="online", nodes_online="true")
    unsaid = api.submit(api.Request(site="unsaid", flags={"model": MODEL}))
    (warning,) = [w for w in unsaid.warnings if "not staged" in w]
    assert "does not say whether its nodes reach the internet" in warning
    assert f"hpc-grpo stage {MODEL} --site unsaid" in warning
    online = api.submit(api.Request(site="online", flags={"model": MODEL}))
    assert not [w for w in online.warnings if "staged" in w]
    run = json.loads((online.run_dir / "run.json").read_text())
    assert (run["model_load"]["commit"], run["model_load"]["offline"]) == ("", False)


def test_offline_is_said_or_implied_and_typos_are_refused(tmp_path: Path) -> None:
    assert _site_obj("", nodes_online=False).nodes_offline is True
    assert _site_obj("", nodes_online=True).nodes_offline is False
    assert _site_obj("", env={"HF_HUB_OFFLINE": "1"}).nodes_offline is True
    assert _site_obj("").nodes_offline is None
    assert _site_obj("", scheduler="local").nodes_offline is False
    assert _site_obj("~/hf").hf_home_path == str(Path("~/hf").expanduser())
    path = tmp_path / "typo.yaml"
    path.write_text("node_online: false\n")
    with pytest.raises(UserError, match="node_online") as exc:
        find_site(str(path))
    assert "nodes_online" in exc.value.hint


def _record(tmp_path: Path, commit: str = "", offline: bool = True) -> RunRecord:
    return RunRecord(run_id="r", run_dir=str(tmp_path / "runs" / "r"), model=MODEL,
                     dataset=stage_dataset(commit), nodes=1, procs_per_node=1, ranks=(),
                     model_load=ModelBlock(commit=commit, hf_home=str(tmp_path / "hf"),
                                           offline=offline))


def stage_dataset(commit: str):  # type: ignore[no-untyped-def]
    from hpc_grpo.rundir.contract import DatasetBlock

    return DatasetBlock(name=DATASET, commit=commit)


def test_ranks_get_the_cache_offline_and_load_the_pinned_snapshot(tmp_path: Path) -> None:
    commit = "a" * 40
    env = child_env({"PATH": "/bin", "HF_HUB_CACHE": "/elsewhere"}, "a1", _record(tmp_path, commit))
    assert (env["HF_HOME"], env["HF_HUB_CACHE"]) == (str(tmp_path / "hf"),
                                                    str(tmp_path / "hf" / "hub"))
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == "1"
    online = child_env({"PATH": "/bin"}, "a1", RunRecord(
        run_id="r", run_dir="", model=MODEL, dataset=stage_dataset(""), nodes=1, procs_per_node=1,
        ranks=()))
    assert not {"HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"} & set(online)

    run = _record(tmp_path, commit)
    with pytest.raises(staged.NotStagedError, match="is hf_home on a filesystem every node"):
        staged.model_source(run)
    snapshot = lay_out(tmp_path / "hf" / "hub", "model", MODEL, {"config.json": b"{}"}, commit)
    lay_out(tmp_path / "hf" / "hub", "dataset", DATASET, {"data/train.jsonl": ROWS}, commit)
    assert staged.model_source(run) == str(snapshot)
    assert staged.dataset_name(run).endswith(f"datasets--tiny-org--tiny-math/snapshots/{commit}")
    assert staged.model_source(_record(tmp_path)) == MODEL  # nothing pinned: as given
    server = dataclasses.replace(run, vllm=VllmBlock(
        enabled=True, mode="server", server=ServerBlock(node=0, gpus=(1,), trainer_gpus=(0,))))
    argv = server_argv(server, 8000)
    assert argv[argv.index("serve") + 1] == str(snapshot)  # `vllm serve` the pinned commit
    assert argv[argv.index("--served-model-name") + 1] == MODEL  # under the name clients use


def test_resume_keeps_the_commit_the_run_trained_from(tiny_files: dict[str, bytes], fake: FakeSlurm,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """main staged again after submit points at another commit: a resume would silently train
    (or stack a LoRA adapter) on other weights, so it is refused, saying how to keep the old."""
    cache = _profile(tmp_path, monkeypatch)
    site = find_site("lab")
    first = lay_out(cache / "hub", "model", MODEL, tiny_files, commit_of(tiny_files))
    old = stage.stage(site, MODEL, download=lambda *a, **k: str(first))
    sets = ("max_prompt_length=32", "max_completion_length=32", "max_steps=4")
    run_dir = api.submit(api.Request(site="lab", flags={"model": MODEL}, sets=sets)).run_dir
    (run_dir / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 1}))
    fake.answer("squeue", "")  # the job is gone
    files = {**tiny_files, "config.json": tiny_files["config.json"] + b"\n"}
    second = lay_out(cache / "hub", "model", MODEL, files, commit_of(files, "new"))
    new = stage.stage(site, MODEL, download=lambda *a, **k: str(second))
    with pytest.raises(UserError, match=f"cannot change model_load.commit from {old.commit} to "
                                        f"{new.commit}.*--revision COMMIT"):
        api.resume(str(run_dir))
    stage.stage(site, MODEL, revision=old.commit, download=lambda *a, **k: str(first))
    resumed = api.resume(str(run_dir), sets=(f"model_revision={old.commit}",))
    run = json.loads((resumed.run_dir / "run.json").read_text())
    assert run["model_load"]["commit"] == old.commit


def test_without_huggingface_hub_stage_names_the_extra(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher install has no huggingface_hub: one line naming what to install."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if absent
    with pytest.raises(UserError) as exc:
        stage.stage(_site_obj(str(tmp_path)), MODEL)
    assert "huggingface_hub" in exc.value.message and "hpc-grpo[stage]" in exc.value.hint
    with pytest.raises(UserError, match="no hf_home"):
        stage.stage(_site_obj(""), MODEL)


@pytest.mark.parametrize("name", ["", "  "])
def test_stage_of_an_empty_name_is_refused_as_empty(name: str) -> None:
    """`hpc-grpo stage "$UNSET"`: the empty name resolved to "." and was refused as a model
    folder without config.json; say what is wrong instead."""
    from hpc_grpo import api

    with pytest.raises(UserError, match="empty name") as exc:
        api.stage(name, "sandbox")
    assert exc.value.field == "stage" and "hub id" in exc.value.hint
