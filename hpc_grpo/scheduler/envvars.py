"""Secrets reach a job through the environment of the process that submits it, not through files.

sbatch (``--export=ALL``, its default) and the local back end's bash hand the submitting
process's environment to the job, so a secret the site profile sets (``HF_TOKEN``...) is put into
this process's environment only for the moment of submission and never written into the job
script, run.json or plan.txt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def exported(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in os.environ while the body runs; what was there before is put back."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
