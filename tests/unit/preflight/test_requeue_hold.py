"""Doctor's requeue hold: Slurm's cred_expire read from `scontrol show config` (Slurm 22.05's
own output, captured on the sandbox cluster), and the row it makes."""

from __future__ import annotations

import pytest

from hpc_grpo.preflight.requeue_hold import DEFAULT_CRED_EXPIRE_S, cred_expire_s, hold_check

# The lines around AuthInfo, as slurmctld 22.05.8 printed them on the sandbox cluster: the
# AuthAlt* keys before it must not be read as AuthInfo.
SANDBOX_22_05 = """Configuration data as of 2026-11-26T12:49:24
AccountingStorageBackupHost = (null)
AllowSpecResourcesUsage = No
AuthAltTypes            = (null)
AuthAltParameters       = (null)
AuthInfo                = {value}
AuthType                = auth/munge
BatchStartTimeout       = 10 sec
SLURM_VERSION           = 22.05.8
"""


@pytest.mark.parametrize(("value", "seconds"), [
    ("cred_expire=10", 10),
    ("(null)", DEFAULT_CRED_EXPIRE_S),  # unset: Slurm's default
    ("socket=/var/run/munge/munge.socket.2,cred_expire=30", 30),
    ("cred_expire=300,socket=/run/munge/munge.socket.2", 300),
    ("socket=/run/munge/munge.socket.2", DEFAULT_CRED_EXPIRE_S),
    ("ttl=5,cred_expire=45,socket=/x", 45),
    ("cred_expire_other=5", DEFAULT_CRED_EXPIRE_S),  # not the key
])
def test_cred_expire_from_the_controllers_config(value: str, seconds: int) -> None:
    assert cred_expire_s(SANDBOX_22_05.format(value=value)) == seconds


@pytest.mark.parametrize("text", ["", "AuthAltParameters = cred_expire=10\n",
                                  "slurm_load_ctl_conf error: Unable to contact slurm controller\n"])
def test_no_authinfo_line_is_not_read_as_the_default(text: str) -> None:
    assert cred_expire_s(text) is None
    assert hold_check(text)[0] == "skip"
    assert hold_check(None)[0] == "skip"


def test_a_short_hold_passes_and_says_its_length() -> None:
    status, detail = hold_check(SANDBOX_22_05.format(value="cred_expire=10"))
    assert status == "pass"
    assert "waits 11 s" in detail and "cred_expire 10 s" in detail


def test_slurms_default_hold_is_a_warning_that_names_the_setting() -> None:
    status, detail = hold_check(SANDBOX_22_05.format(value="(null)"))
    assert status == "warn"
    assert "waits 121 s" in detail and "Slurm's default" in detail
    assert "AuthInfo=cred_expire" in detail  # where an administrator changes it


def test_an_explicit_120_is_not_called_the_default() -> None:
    status, detail = hold_check(SANDBOX_22_05.format(value="cred_expire=120"))
    assert status == "warn" and "waits 121 s" in detail
    assert "AuthInfo cred_expire 120 s" in detail and "default" not in detail.split(":")[0]


def test_the_boundary_is_the_restart_goal() -> None:
    assert hold_check(SANDBOX_22_05.format(value="cred_expire=59"))[0] == "pass"  # 60 s
    assert hold_check(SANDBOX_22_05.format(value="cred_expire=60"))[0] == "warn"  # 61 s
