"""What runs on the compute nodes. Imports nothing of the launcher side but ``contract``.

``node``: the per-node task submitit starts (torchrun, signals, retry, vLLM server);
``rank``: one training rank (GRPOTrainer and what it needs); ``models``: offline example models;
``probe``: doctor's on-node half; ``rundir``: the run directory's files; ``contract``: the typed
run record and state shared with the launcher.
"""
