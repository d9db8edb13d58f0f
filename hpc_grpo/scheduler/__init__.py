"""Scheduler back ends behind one interface (``backend.py``): Slurm and this machine, and the job
script both run (``render.py`` + sbatch_templates/)."""
