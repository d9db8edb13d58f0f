"""Regenerate hpc_grpo/grpo_fields.txt from the installed TRL.

The launcher validates recipe keys against this list so a login node needs no trl; the test
suite compares it with the installed GRPOConfig and fails when they drift apart.
"""

import dataclasses
from pathlib import Path

import trl
from trl import GRPOConfig

names = sorted(f.name for f in dataclasses.fields(GRPOConfig))
target = Path(__file__).resolve().parent.parent / "hpc_grpo" / "grpo_fields.txt"
header = f"# GRPOConfig fields of trl {trl.__version__}; regenerate: python scripts/update_grpo_fields.py\n"
target.write_text(header + "\n".join(names) + "\n")
print(f"wrote {len(names)} fields to {target}")
