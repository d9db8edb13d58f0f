"""`python -m hpc_grpo.runtime.node RUN_DIR`: this node's share of a run, without submitit."""

import sys

from hpc_grpo.runtime.node.task import main

sys.exit(main())
