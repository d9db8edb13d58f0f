"""What runs on the compute nodes. Imports of the package only itself and ``hpc_grpo.rundir``
(the run directory's room, shared with the launcher), never the launcher side.

``node``: the per-node task the job script starts (under Slurm through submitit's job role, on a
local site exec'd by the script itself): torchrun, signals, retry, vLLM server; ``rank``: one
training rank (GRPOTrainer and what it needs); ``models``: offline example models; ``probe``:
doctor's on-node half.
"""
