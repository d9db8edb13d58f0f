"""Runs after submit: the registry of run directories, their tracking, and terminal views."""
