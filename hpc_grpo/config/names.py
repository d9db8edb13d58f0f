"""Run ids, and the job names they are made from: one rule, checked before anything is planned.

A run id is the name of one directory under the output root (``root / run_id``), so it must be
one path component: a ``/`` or ``..`` in it put the run directory elsewhere (``a/b`` under
``runs/a``, ``../../x`` beside the output root, an absolute path anywhere), and
``create_run_dir`` made the parents before failing with a traceback. It is also written into
the job script (the header comment and, in the run directory, #SBATCH --output), and a job name
into #SBATCH --job-name, where no shell quoting applies. Both are file names, whose length the
file system caps.
"""

from __future__ import annotations

import re

from hpc_grpo.errors import UserError

FILE_NAME_MAX = 255  # bytes in one path component (ext4, XFS, Lustre, GPFS, NFS)
# create_run_dir writes the run under a hidden twin first, ".<run id>.<8 random characters>"
# (tempfile.mkdtemp): 10 bytes more than the run id, so a run id must stay under 245 bytes.
TEMP_NAME_EXTRA = len("..") + 8
RUN_ID_MAX = 200  # under FILE_NAME_MAX - TEMP_NAME_EXTRA, with room to spare
# A job's run ids are "<name>-0001", "<name>-0002"...: room for the dash and up to 9 digits.
JOB_NAME_MAX = RUN_ID_MAX - 10
# Letters, digits and a few punctuation marks sbatch takes in a directive and a shell never
# splits; not / (a path), % (Slurm's file-name patterns in --output), and not . or - first (a
# hidden file, . and .., a name that reads as a command-line option).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,:@+=-]*")
_HINT = "letters, digits and _ . - + = , : @ (not . or - first)"


def _shown(value: str) -> str:
    """The value as the error line shows it: quoted, escapes visible, long ones cut short."""
    return repr(value) if len(value) <= 60 else repr(value[:40]) + f"... ({len(value)} characters)"


def _check(value: str, field: str, what: str, limit: int, example: str) -> str:
    if len(value.encode()) > limit:
        raise UserError(f"{_shown(value)} is too long for {what}: at most {limit} bytes",
                        field=field, hint=f"e.g. {example}")
    if not _NAME.fullmatch(value):
        raise UserError(f"{_shown(value)} is not {what}", field=field,
                        hint=f"{_HINT}, e.g. {example}")
    return value


def check_run_id(value: str, field: str = "--run-id") -> str:
    """A run id the user gave: one directory name the output root can hold, or refused."""
    return _check(value, field, "a run id (one directory name under the output root)",
                  RUN_ID_MAX, "my-run-0001")


def check_job_name(value: str, field: str = "--name") -> str:
    """A job name: the #SBATCH --job-name, and what its run ids are made from (NAME-NNNN), so
    it follows the run id's rule, with room for the number."""
    return _check(value, field, "a job name (#SBATCH --job-name; its runs are NAME-NNNN)",
                  JOB_NAME_MAX, "my-grpo-job")
