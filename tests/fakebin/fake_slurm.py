"""A stand-in for any Slurm binary in unit tests: records its argv, prints canned output.

Called as `fake_slurm.py NAME ARGS...` by the sh wrappers that tests/unit/slurmfake.py puts
first on PATH. Its state lives in $FAKE_SLURM_DIR: calls.jsonl (one {"name", "argv"[, "script"]}
line per call, with "env": the variables named in $FAKE_SLURM_RECORD_ENV) and optional
NAME.out / NAME.err / NAME.rc (stdout, stderr, exit code) and NAME.sleep (seconds to wait
before answering: a controller that does not answer).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DEFAULT_OUT = {"sbatch": "Submitted batch job 4242\n"}


def main() -> int:
    name, args = sys.argv[1], sys.argv[2:]
    folder = Path(os.environ["FAKE_SLURM_DIR"])
    call: dict[str, object] = {"name": name, "argv": args}
    if name == "sbatch" and args and Path(args[-1]).is_file():
        call["script"] = Path(args[-1]).read_text()
    recorded = [k for k in os.environ.get("FAKE_SLURM_RECORD_ENV", "").split(",") if k]
    if recorded:  # what this binary's environment held: what sbatch would export to the job
        call["env"] = {k: os.environ[k] for k in recorded if k in os.environ}
    with (folder / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps(call) + "\n")
    out, err, rc, sleep = (folder / f"{name}.{ext}" for ext in ("out", "err", "rc", "sleep"))
    if sleep.exists():
        time.sleep(float(sleep.read_text()))
    sys.stdout.write(out.read_text() if out.exists() else DEFAULT_OUT.get(name, ""))
    sys.stderr.write(err.read_text() if err.exists() else "")
    return int(rc.read_text()) if rc.exists() else 0


if __name__ == "__main__":
    sys.exit(main())
