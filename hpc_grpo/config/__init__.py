"""Frozen, typed configuration: site profiles and job specs."""
