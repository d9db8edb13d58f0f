"""Scheduler back ends: the job script (render + sbatch_templates/), Slurm, and this machine."""
