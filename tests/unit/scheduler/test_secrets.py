"""Secrets in a site profile reach the job through sbatch's environment, never through a file;
run directories are the user's only unless the profile says otherwise."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpc_grpo import api
from hpc_grpo.cli import main
from hpc_grpo.errors import UserError
from tests.unit.slurmfake import FakeSlurm

SECRETS = {"HF_TOKEN": "hf_sEcReT0001", "WANDB_API_KEY": "wandb-sEcReT0002",
           "VAULT_PASS": "vault-sEcReT0003"}
MODEL = "Qwen/Qwen2.5-0.5B"


def _profile(sites: Path, **extra: str) -> None:
    """A site unlike the sandbox: partition `batch`, nodes cn1..cn4, one site-only secret."""
    sites.mkdir(parents=True, exist_ok=True)
    env = {**SECRETS, "OMP_NUM_THREADS": "1"}
    lines = ["partition: batch", "cpus_per_node: 8", "max_nodes: 4", "secret_env: [VAULT_PASS]",
             "port_range: [30000, 30999]", "env:",
             *(f"  {k}: \"{v}\"" for k, v in env.items()), *(f"{k}: {v}" for k, v in extra.items())]
    (sites / "vault.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture
def fake(fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """The shared fake Slurm (tests/unit/conftest.py), with this module's answers."""
    monkeypatch.setenv("FAKE_SLURM_RECORD_ENV", ",".join(SECRETS))
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)
    return fake


def _files_holding_secrets(*roots: Path) -> list[str]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path}: {k}" for k, v in SECRETS.items() if v.encode() in data]
    return found


def test_no_secret_value_in_any_file_and_the_job_still_gets_them(
        fake: FakeSlurm, tmp_path: Path, hpc_home: Path) -> None:
    _profile(tmp_path / "sites")
    runner = CliRunner()
    args = ["--site", "vault", "--model", MODEL, "--nodes", "2",
            "--output-root", str(tmp_path / "runs")]
    for command in (["render"], ["submit", "--dry-run"], ["plan"]):
        out = runner.invoke(main, [*command, *args])
        assert out.exit_code == 0, out.output
        assert not [k for k, v in SECRETS.items() if v in out.output], command
    rendered = runner.invoke(main, ["render", *args]).output
    assert "export OMP_NUM_THREADS=1" in rendered and "#SBATCH --export=ALL" in rendered
    assert "never written here: HF_TOKEN VAULT_PASS WANDB_API_KEY" in rendered

    result = api.submit(api.Request(site="vault", flags={"model": MODEL, "nodes": 2},
                                    output_root=str(tmp_path / "runs"), python="/usr/bin/python3"))
    assert _files_holding_secrets(result.run_dir, hpc_home) == []
    (sbatch,) = fake.calls("sbatch")
    assert not [k for k, v in SECRETS.items() if v in sbatch["script"]]
    assert sbatch["env"] == SECRETS  # what sbatch exports to the job
    assert not [k for k in SECRETS if k in os.environ]  # only for the moment of submission
    assert stat.S_IMODE(result.run_dir.stat().st_mode) == 0o700

    (result.run_dir / "state.json").write_text(json.dumps({"phase": "interrupted", "step": 3}))
    fake.answer("squeue", "")
    fake.answer("sbatch", "Submitted batch job 4343\n")
    again = api.resume(str(result.run_dir))
    assert again.job_id == "4343" and fake.calls("sbatch")[-1]["env"] == SECRETS
    assert _files_holding_secrets(result.run_dir, hpc_home) == []


def test_run_dir_mode_from_the_profile(fake: FakeSlurm, tmp_path: Path) -> None:
    _profile(tmp_path / "sites", run_dir_mode='"0750"')
    result = api.submit(api.Request(site="vault", flags={"model": MODEL},
                                    output_root=str(tmp_path / "runs"), python="/usr/bin/python3"))
    assert stat.S_IMODE(result.run_dir.stat().st_mode) == 0o750
    _profile(tmp_path / "bad", run_dir_mode='"0644"')
    with pytest.raises(UserError, match="run_dir_mode '0644' is not an octal mode"):
        api.prepare(api.Request(site=str(tmp_path / "bad" / "vault.yaml"),
                                flags={"model": MODEL}))
