"""The memory model of a GPU job, a room of its own inside the planner and its lowest: it
imports nothing of the planner outside itself. The speed room builds on it, and
planner/memory_plan.py's ``plan_memory`` ties the two together.

``arch.py``: a dense decoder's shape and parameter count, read from its config.json;
``request.py``: what a plan is asked (PlanRequest), the input of both rooms;
``estimate.py``: per-GPU memory of one layout, with the assumptions its numbers come from;
``search.py``: the layouts tried, cheapest first; ``reasons.py``: one line per choice;
``hints.py``: the smallest change that makes an impossible request fit; ``lora.py``: what LoRA
changes.
"""
