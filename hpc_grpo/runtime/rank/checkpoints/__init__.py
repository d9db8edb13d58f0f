"""Checkpoints of a rank: which folders are complete and kept (``folders``), the resume's read
(``read``, ``prefetch``), how a save is written and timed (``save_parts``, ``pinned_save``,
``deepspeed_save``, ``save_speed``) and the record of each restart (``restart_record``)."""
