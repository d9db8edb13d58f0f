"""The runtime's one Slurm runner (runtime/shared/scontrol.py): bounded, never raising, and, for
a node task that cancels its own job, outliving the SIGTERM that cancel sends its processes."""

from __future__ import annotations

from hpc_grpo.runtime.shared.scontrol import slurm_command


def test_a_command_that_is_sent_sigterm_outlives_it_only_when_asked() -> None:
    # sh stands in for scontrol: the TERM arrives while it runs, as scancel's does
    script = ["-c", "kill -TERM $$; echo still here"]
    assert slurm_command("sh", script, outlive_term=True) == ("still here\n", "")
    out, problem = slurm_command("sh", script)
    assert out == "" and problem == "sh -c kill -TERM $$; echo still here failed: exit code -15"


def test_failures_are_one_line_never_an_exception() -> None:
    assert slurm_command("no-such-slurm-binary", ["x"])[1].startswith(
        "no-such-slurm-binary x failed: ")
    assert slurm_command("sh", ["-c", "echo first >&2; echo refused >&2; exit 1"]) == (
        "", "sh -c echo first >&2; echo refused >&2; exit 1 failed: refused")
    assert slurm_command("sleep", ["5"], timeout_s=0.2) == ("", "sleep 5 timed out")
