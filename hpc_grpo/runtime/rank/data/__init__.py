"""What a rank trains on: the dataset's prompts, the reward functions (the built-in math ones
too), their checks together (``job_inputs``, also run by the login node's ``inputs_probe``), and
each epoch's data order across a resume."""
