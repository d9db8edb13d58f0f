"""What runs on the compute nodes. Imports of the package only itself and ``hpc_grpo.rundir``
(the run directory's room, shared with the launcher), never the launcher side.

A stack, bottom up (tests/unit/runtime/test_runtime_layers.py):

* ``shared``: what the node task and a rank both use;
* the root modules (``probe``: doctor's on-node half, ``probe_lines``, ``probe_gpus``,
  ``linkbench``, ``child_answer``), importing ``shared`` and each other, and ``models``:
  offline example models;
* ``node``: the per-node task the job script starts (under Slurm through submitit's job role, on
  a local site exec'd by the script itself): torchrun, signals, retry, vLLM server; and
  ``rank``: one training rank (GRPOTrainer and what it needs). Neither imports the other: the
  node task names the rank's entry module as a string;
* ``posttrain``: export and eval's torch work, on ``rank``'s data and rewards.
"""
