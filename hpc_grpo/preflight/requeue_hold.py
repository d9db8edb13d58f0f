"""Slurm's hold on a requeued job: a restart cost that no setting of the job removes.

slurmctld does not start a requeued job until the job credentials of its last attempt have
expired. When that attempt has ended, it sets the job's begin time to that moment (the new
record's Submit in sacct) plus ``cred_expire`` plus 1 s. ``cred_expire`` is set in slurm.conf's
``AuthInfo``; Slurm's default is 120 s.

Measured (Slurm 22.05, Debian 12):
- On the sandbox cluster (../shared/design/slurm-sandbox.md): 121 s in ``BeginTime`` at the
  default, 11 s with ``AuthInfo=cred_expire=10``.
- On the two-node GPU sandbox on 2026-11-26 (sacct: the REQUEUED attempt's end to the next
  start): 11 s.
  docs/results/2026-11-26-multinode-requeue-resume-h100x2-second-loan.json

Every requeue pays this hold before the new attempt starts. That includes preemption, the
stop before the time limit, and a stop sent with ``scancel --signal``. Doctor therefore reports it beside the
other facts of the cluster. The check is pure: it takes the text of ``scontrol show config``
(scheduler/slurm.py reads it) and returns values.
"""

from __future__ import annotations

import re
from typing import Literal

DEFAULT_CRED_EXPIRE_S = 120  # Slurm's default (slurm.conf(5), AuthInfo)
SLOW_HOLD_S = 60  # more than this: the restart goal of issue #30 (60 s) cannot be met

_AUTH_INFO = re.compile(r"^\s*AuthInfo\s*=\s*(?P<value>.*?)\s*$", re.MULTILINE)
_CRED_EXPIRE = re.compile(r"(?:^|,)\s*cred_expire\s*=\s*(?P<seconds>\d+)\s*(?:,|$)")


def _setting(config_text: str) -> tuple[int, bool] | None:
    """(cred_expire, whether AuthInfo sets it), or None without an ``AuthInfo`` line."""
    found = _AUTH_INFO.search(config_text)
    if found is None:
        return None
    setting = _CRED_EXPIRE.search(found.group("value"))
    return (int(setting.group("seconds")), True) if setting else (DEFAULT_CRED_EXPIRE_S, False)


def cred_expire_s(config_text: str) -> int | None:
    """``cred_expire`` from ``scontrol show config``.

    Returns Slurm's default when ``AuthInfo`` does not set it, and None when the text has no
    ``AuthInfo`` line (it is not that command's output)."""
    found = _setting(config_text)
    return found[0] if found else None


def hold_check(config_text: str | None) -> tuple[Literal["pass", "warn", "skip"], str]:
    """(status, detail) of doctor's "requeue hold" row."""
    found = _setting(config_text) if config_text is not None else None
    if found is None:
        return "skip", "could not read `scontrol show config` (AuthInfo's cred_expire)"
    seconds, explicit = found
    source = "AuthInfo cred_expire" if explicit else "cred_expire, Slurm's default"
    detail = (f"a requeued job waits {seconds + 1} s after its previous attempt ends before "
              f"Slurm may start it again ({source} {seconds} s + 1): every requeue (preemption, "
              f"the stop before the time limit, a signalled stop) adds it to the restart")
    if seconds + 1 > SLOW_HOLD_S:
        return "warn", (f"{detail}; a restart cannot take less (the cluster's slurm.conf "
                        f"AuthInfo=cred_expire=N sets it; its administrators decide)")
    return "pass", detail
