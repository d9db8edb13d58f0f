"""The step-time model of a GPU job, a room of its own inside the planner (``predict``). It
builds on the memory room (the request, the layouts and their memory) and imports nothing of
the planner above the two rooms.

``hardware_figures.py``: per card kind figures (memory bandwidth, bf16 peak) and the links'
bandwidths; ``terms.py``: one function per part of a step (generation, training, exchange,
optimizer, weight sync, sleep/wake), with the assumptions and calibrated constants they use;
``predict.py``: a layout's (or server mode's) predicted s/step and tokens/s as a sum of those
terms; ``choose.py``: the fastest fitting layout among the memory room's candidates, why each
other one lost, and the reason line of the plan's gradient checkpointing choice; ``server.py``:
server mode's trainer and server memory and its step. Held to the saved GPU measurements by
tests/unit/planner/test_speed_calibration.py.
"""
