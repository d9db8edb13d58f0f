"""Offline example models built in code (no hub needed): a tiny one and real layer shapes."""
