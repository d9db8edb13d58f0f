"""The memory plan of a GPU job, a room of its own inside the planner (``plan_memory``).

``arch.py``: a dense decoder's shape and parameter count, read from its config.json;
``request.py``: what a plan is asked (PlanRequest), the input of both rooms;
``estimate.py``: per-GPU memory of one layout, with the assumptions its numbers come from;
``search.py``: the layouts tried, cheapest first; ``reasons.py``: one line per choice;
``hints.py``: the smallest change that makes an impossible request fit; ``lora.py``: what LoRA
changes; ``plan.py``: ``plan_memory``, which checks the request and ties them together.
"""
