"""The submitit hooks hpc-grpo relies on, checked against the installed submitit.

pyproject pins submitit to the tested minor version; a release that renames one of these fails
here, in one clear test, instead of in a job on a cluster.
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import version
from pathlib import Path

import tomllib

from hpc_grpo.scheduler import slurm
from tests.paths import REPO


def test_installed_submitit_is_inside_the_pin() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("submitit"))
    low, high = re.fullmatch(r"submitit>=([\d.]+),<([\d.]+)", pin).groups()  # type: ignore[union-attr]
    installed = tuple(int(p) for p in version("submitit").split(".")[:3])
    assert tuple(int(p) for p in low.split(".")) <= installed < tuple(int(p) for p in high.split("."))


def test_slurm_executor_lets_us_supply_the_script(tmp_path: Path) -> None:
    """submit() overrides _make_submission_file_text and checks the script holds the command
    submitit runs on each node, which must be what submitit_command says."""
    from submitit.slurm.slurm import SlurmExecutor

    params = list(inspect.signature(SlurmExecutor._make_submission_file_text).parameters)
    assert params == ["self", "command", "uid"]
    # submit() also overrides the sbatch argv hook, to learn the submission file's name (the
    # job's identity) and to keep submitit's argv: it must still be sbatch and that file.
    params = list(inspect.signature(SlurmExecutor._make_submission_command).parameters)
    assert params == ["self", "submission_file_path"]
    stub = SlurmExecutor.__new__(SlurmExecutor)
    assert SlurmExecutor._make_submission_command(stub, Path("/x/s.sh")) == ["sbatch", "/x/s.sh"]
    executor = SlurmExecutor.__new__(SlurmExecutor)
    executor.folder = tmp_path
    executor.python = "/opt/py/bin/python"
    assert executor._submitit_command_str == slurm.submitit_command("/opt/py/bin/python", tmp_path)


def test_node_entry_point_and_requeue_hooks_exist() -> None:
    """The sbatch template runs `python -m submitit.core._submit FOLDER`; on the requeue signal
    submitit's handler calls the task's checkpoint() and wraps the result in DelayedSubmission;
    the local scheduler's controller is recognised by its module name."""
    submit_module = importlib.import_module("submitit.core._submit")
    assert callable(submit_module.submitit_main)
    from submitit.core import job_environment, utils

    assert hasattr(job_environment.SignalHandler, "checkpoint_and_try_requeue")
    assert list(inspect.signature(utils.DelayedSubmission.__init__).parameters)[:2] == ["self", "function"]
    assert hasattr(importlib.import_module("submitit.local._local"), "Controller")
