"""Test-only fault injection, kept apart from the production rank modules.

Each fault is off unless the ranks' environment names it (``HPC_GRPO_FAULT_*``): ``hang`` makes
one rank block inside a reward so the watchdog can be seen to act; ``stale_weights`` stops the
weight sync so the vLLM/trainer log-prob check can be seen to fire. Tests and benchmarks set
them; a real run never should. train.py calls each one's hook, which does nothing when off.
"""
