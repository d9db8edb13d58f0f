"""After training, the launcher's side: `hpc-grpo export` (a checkpoint as a checked Hugging Face
folder: ``plan``, ``write``, ``card``; ``push`` to the hub; ``side_job``: the export as a job of
the run's back end) and `hpc-grpo eval` (``evaluate``). The run is read typed: run.json through
``runs.runfiles.read_run_record``, the ledgers of exports, evaluations, pushes and export jobs
through ``rundir/ledgers.py``; the one line `status` shows of each is ``runs/after_training.py``.
The torch work runs in a child Python (``child``): ``hpc_grpo/runtime/posttrain/``.
"""
